//! `ankusa source put|get|list|delete|enable`: a tenant's sources and their sink entries.

use super::args::{Cli, SourceCmd};
use super::out::json_line;
use super::setup::{load_config, read_spec, store};
use ankusa::Error;

/// Run one `source` command. `put` reads and checks the file before connecting (a bad file
/// is a usage error, exit 2); a source with no sinks needs `--allow-no-sinks`.
pub async fn source(cli: &Cli, cmd: &SourceCmd) -> Result<(), Error> {
    let json = cli.json;
    let cfg = load_config(cli)?;
    if let SourceCmd::Put {
        tenant,
        source,
        file,
        allow_no_sinks,
    } = cmd
    {
        // Read and check the file before connecting: a bad file is a usage error.
        let spec = read_spec(file)?;
        if spec.sinks.is_empty() && !allow_no_sinks {
            return Err(Error::InvalidSource(format!(
                "{}: no sinks: hooks committed to {tenant}/{source} would be stored and go nowhere; add a sink, or pass --allow-no-sinks if that is what you want",
                file.display()
            )));
        }
        let s = store(&cfg).await?;
        let v = s.put_source(tenant, source, &spec).await?;
        let warnings = ankusa::admin::unforwarded_filter_headers(
            &spec,
            &ankusa::admin::ForwardHeaders::new(&cfg.admin.forward_headers),
        );
        for w in &warnings {
            eprintln!("warning: {w}");
        }
        return if json {
            json_line(&serde_json::json!({
                "tenant": tenant, "source": source, "version": v, "sinks": spec.sinks.len(),
                "warnings": warnings,
            }))
        } else {
            let n = spec.sinks.len();
            let sinks = if n == 1 { "sink" } else { "sinks" };
            outln!("source {tenant}/{source} stored (version {v}, {n} {sinks})");
            Ok(())
        };
    }
    let s = store(&cfg).await?;
    match cmd {
        SourceCmd::Put { .. } => Ok(()),
        SourceCmd::Get { tenant, source } => match s.get_source(tenant, source).await? {
            Some(spec) if json => json_line(&spec),
            Some(spec) => {
                outln!(
                    "{}",
                    serde_json::to_string_pretty(&spec).map_err(|e| Error::Other(e.to_string()))?
                );
                Ok(())
            }
            None => Err(Error::NotFound(format!("no source {tenant}/{source}"))),
        },
        SourceCmd::List => {
            let all = s.list_sources().await?;
            if json {
                let list: Vec<_> = all
                    .iter()
                    .map(|(t, so)| serde_json::json!({"tenant": t, "source": so}))
                    .collect();
                return json_line(&serde_json::json!({ "sources": list }));
            }
            if all.is_empty() {
                outln!("no sources");
            }
            for (t, so) in all {
                outln!("{t}/{so}");
            }
            Ok(())
        }
        SourceCmd::Delete { tenant, source } => {
            if !s.delete_source(tenant, source).await? {
                return Err(Error::NotFound(format!("no source {tenant}/{source}")));
            }
            if json {
                json_line(&serde_json::json!({"tenant": tenant, "source": source, "deleted": true}))
            } else {
                outln!("source {tenant}/{source} deleted; its pending rows are dead-lettered source_gone({source}) as they come due");
                Ok(())
            }
        }
        SourceCmd::Enable {
            tenant,
            source,
            index,
        } => {
            let r =
                ankusa::ops::enable_sink(&s, tenant, source, *index, cfg.operator.events_max_len)
                    .await?;
            if json {
                json_line(&r)
            } else {
                if r.was_disabled {
                    outln!("sink {index} of {tenant}/{source} enabled; new hooks make rows for it again");
                } else {
                    outln!("sink {index} of {tenant}/{source} was not disabled; nothing changed");
                }
                Ok(())
            }
        }
    }
}
