//! The scheduler's claim check-in ([`crate::claim_check`]): upload the bodies a scan's
//! rows need checked in, then record each reference with its hook in one call fenced by
//! the leader's token, so every sink and retry of the hook reuses it.

use crate::claim_check::BlobStore;
use crate::store::Store;
use bytes::Bytes;
use std::time::Duration;

/// Check one body in (the fallback of an attempt whose pack failed): store it, then record
/// the reference with the hook so every sink and retry reuses it.
pub(super) async fn check_in(
    blobs: &BlobStore,
    store: &Store,
    token: &str,
    tenant: &str,
    hook: u64,
    body: Bytes,
) -> Result<String, String> {
    let r = async {
        let url = blobs.put(tenant, hook, body).await?;
        let recorded = store.set_claim_refs(token, &[(hook, url.clone())]).await;
        match recorded {
            Ok(gone) if gone.is_empty() => Ok(url),
            Ok(gone) => {
                blobs.delete_later(gone);
                Err("claim check: the hook is gone".to_string())
            }
            // Not deleted: the reply may be what was lost, with the reference recorded (a
            // dangling pointer is worse than an orphan, which the lifecycle rule removes).
            Err(e) => Err(format!("claim check: recording the reference: {e}")),
        }
    }
    .await;
    let result = if r.is_ok() { "ok" } else { "error" };
    metrics::counter!("ankusa_claim_checks_total", "via" => "attempt", "result" => result)
        .increment(1);
    r
}

/// Check in one tenant's pack of bodies from one scan: upload them together (concurrently,
/// one object each — the SQS Extended Client pointer names one object per body), then record
/// every reference with its hook in one pipelined call. Returns one result per hook.
pub(super) async fn check_in_pack(
    blobs: &BlobStore,
    store: &Store,
    token: &str,
    tenant: &str,
    bodies: Vec<(u64, Bytes)>,
    deadline: Duration,
) -> Vec<(u64, Result<String, String>)> {
    let hooks: Vec<u64> = bodies.iter().map(|(h, _)| *h).collect();
    let upload = async {
        let mut set = tokio::task::JoinSet::new();
        for (hook, body) in bodies {
            let (b, t) = (blobs.clone(), tenant.to_string());
            set.spawn(async move { (hook, b.put(&t, hook, body).await) });
        }
        let mut out = Vec::with_capacity(hooks.len());
        while let Some(r) = set.join_next().await {
            if let Ok(x) = r {
                out.push(x);
            }
        }
        out
    };
    let mut results = tokio::time::timeout(deadline, upload)
        .await
        .unwrap_or_default();
    let refs: Vec<(u64, String)> = results
        .iter()
        .filter_map(|(h, r)| r.as_ref().ok().map(|u| (*h, u.clone())))
        .collect();
    if !refs.is_empty() {
        match store.set_claim_refs(token, &refs).await {
            Ok(gone) if !gone.is_empty() => {
                for (_, r) in results.iter_mut() {
                    if r.as_ref().is_ok_and(|u| gone.contains(u)) {
                        *r = Err("claim check: the hook is gone".into());
                    }
                }
                blobs.delete_later(gone);
            }
            Ok(_) => {}
            Err(e) => {
                // Not deleted: the lost part may be the reply, with the references recorded.
                let e = format!("claim check: recording the references: {e}");
                for (_, r) in results.iter_mut() {
                    *r = Err(e.clone());
                }
            }
        }
    }
    // A hook whose upload never answered (deadline) failed too.
    for h in hooks {
        if !results.iter().any(|(x, _)| *x == h) {
            results.push((h, Err("claim check: pack timed out".into())));
        }
    }
    for (_, r) in &results {
        let result = if r.is_ok() { "ok" } else { "error" };
        metrics::counter!("ankusa_claim_checks_total", "via" => "pack", "result" => result)
            .increment(1);
    }
    results
}
