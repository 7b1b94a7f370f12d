//! The records of the delivery log as the `log` stream carries them (one JSON object per line
//! of an entry's `r` field, written by `settle.lua`), parsed into typed records. Pure: no I/O.

use crate::store::AttemptRecord;
use serde::{Deserialize, Serialize};

/// How a hook ended, as the log keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HookState {
    /// Every row of the hook ended delivered (or no longer matched its entry).
    Delivered,
    /// One or more of its rows were dead-lettered.
    DeadLettered,
}

impl HookState {
    /// The state's name, as stored and as searched (`delivered`, `dead_lettered`).
    pub fn as_str(self) -> &'static str {
        match self {
            HookState::Delivered => "delivered",
            HookState::DeadLettered => "dead_lettered",
        }
    }

    /// The state named `s`, if it is one.
    pub fn parse(s: &str) -> Option<HookState> {
        match s {
            "delivered" => Some(HookState::Delivered),
            "dead_lettered" => Some(HookState::DeadLettered),
            _ => None,
        }
    }
}

/// A hook whose last row ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookEnded {
    /// Tenant id.
    pub tenant: String,
    /// Hook id.
    pub hook: u64,
    /// Delivered everywhere, or not.
    pub state: HookState,
    /// Source id.
    pub source: String,
    /// The producer's event type, if any.
    pub event_type: Option<String>,
    /// When it was committed, ms (Redis clock); 0 when unknown.
    pub committed_ms: i64,
    /// Rows of it dead-lettered.
    pub dead_rows: u32,
    /// When its last row ended, ms (Redis clock).
    pub ended_ms: i64,
}

/// One record of the log.
#[derive(Debug, Clone, PartialEq)]
pub enum LogRecord {
    /// An attempt of one of a hook's rows.
    Attempt {
        /// Tenant id.
        tenant: String,
        /// Hook id.
        hook: u64,
        /// What the attempt did.
        record: AttemptRecord,
    },
    /// A hook ended.
    Ended(HookEnded),
}

/// The body of a hook that ended, kept in the log (`log.keep_bodies`) for show and resend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptBody {
    /// Tenant id.
    pub tenant: String,
    /// Hook id.
    pub hook: u64,
    /// When the hook ended, ms (the day partition it goes to).
    pub ended_ms: i64,
    /// The producer headers as Redis held them (the commit's encoding).
    pub headers: String,
    /// The body's bytes.
    pub body: Vec<u8>,
}

/// The records of one stream entry, and how many of its lines were not records (left out
/// and counted, never a stop of the archiver).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Parsed {
    /// The records, in the entry's order.
    pub records: Vec<LogRecord>,
    /// Lines that were not a record of this version.
    pub malformed: usize,
    /// The bodies kept of the hooks this entry ended.
    pub bodies: Vec<KeptBody>,
}

/// The records of a stream entry and the bodies it carries: a body is taken for a hook this
/// entry ended (a body without its ended record is left out).
pub fn parse_log_entry(entry: &crate::store::LogEntry) -> Parsed {
    if entry.records.is_empty() {
        // An entry without records (written by other means): counted, left out.
        return Parsed {
            malformed: 1,
            ..Parsed::default()
        };
    }
    let mut p = parse_entry(&entry.records);
    for r in &p.records {
        if let LogRecord::Ended(e) = r {
            if let Some((headers, body)) = entry.bodies.get(&e.hook) {
                p.bodies.push(KeptBody {
                    tenant: e.tenant.clone(),
                    hook: e.hook,
                    ended_ms: e.ended_ms,
                    headers: headers.clone(),
                    body: body.clone(),
                });
            }
        }
    }
    p
}

#[derive(Deserialize)]
struct Line {
    t: String,
    h: u64,
    #[serde(default)]
    a: Option<AttemptRecord>,
    #[serde(default)]
    e: Option<String>,
    #[serde(default)]
    s: Option<String>,
    #[serde(default)]
    et: Option<String>,
    #[serde(default)]
    c: Option<i64>,
    #[serde(default)]
    d: Option<u32>,
    #[serde(default)]
    at: Option<i64>,
}

/// The records of an entry's `r` field.
pub fn parse_entry(text: &str) -> Parsed {
    let mut out = Parsed::default();
    for line in text.split('\n').filter(|l| !l.trim().is_empty()) {
        match serde_json::from_str::<Line>(line).ok().and_then(record) {
            Some(r) => out.records.push(r),
            None => out.malformed += 1,
        }
    }
    out
}

fn record(l: Line) -> Option<LogRecord> {
    if let Some(a) = l.a {
        return Some(LogRecord::Attempt {
            tenant: l.t,
            hook: l.h,
            record: a,
        });
    }
    Some(LogRecord::Ended(HookEnded {
        tenant: l.t,
        hook: l.h,
        state: HookState::parse(l.e.as_deref()?)?,
        source: l.s.unwrap_or_default(),
        event_type: l.et.filter(|e| !e.is_empty()),
        committed_ms: l.c.unwrap_or(0),
        dead_rows: l.d.unwrap_or(0),
        ended_ms: l.at?,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_gives_its_attempts_and_ended_hooks_and_counts_what_is_not_a_record() {
        let text = concat!(
            r#"{"t":"acme","h":7,"a":{"row":"7.0","sink":0,"attempt":1,"started_ms":1000,"duration_ms":5,"outcome":"delivered","status":200}}"#,
            "\n",
            r#"{"t":"acme","h":7,"e":"delivered","s":"orders","et":"order.paid","c":990,"d":0,"at":1005}"#,
            "\nnot json\n",
            r#"{"t":"acme","h":8,"e":"exploded","s":"orders","c":1,"d":0,"at":2}"#,
        );
        let p = parse_entry(text);
        assert_eq!(p.malformed, 2);
        assert_eq!(p.records.len(), 2);
        let LogRecord::Attempt {
            tenant,
            hook,
            record,
        } = &p.records[0]
        else {
            panic!("an attempt first: {:?}", p.records[0]);
        };
        assert_eq!(
            (tenant.as_str(), *hook, record.status),
            ("acme", 7, Some(200))
        );
        assert_eq!(
            p.records[1],
            LogRecord::Ended(HookEnded {
                tenant: "acme".into(),
                hook: 7,
                state: HookState::Delivered,
                source: "orders".into(),
                event_type: Some("order.paid".into()),
                committed_ms: 990,
                dead_rows: 0,
                ended_ms: 1005,
            })
        );
        assert!(p.bodies.is_empty());
    }

    #[test]
    fn a_body_is_taken_for_the_hook_the_entry_ended_and_only_for_it() {
        let mut entry = crate::store::LogEntry {
            id: "1-0".into(),
            records: r#"{"t":"acme","h":7,"e":"delivered","s":"orders","c":990,"d":0,"at":1005}"#
                .into(),
            ..Default::default()
        };
        entry
            .bodies
            .insert(7, ("{\"x-a\":\"1\"}".into(), vec![0xff, b'{', b'}']));
        entry.bodies.insert(8, (String::new(), b"stray".to_vec()));
        let p = parse_log_entry(&entry);
        assert_eq!(p.records.len(), 1);
        assert_eq!(
            p.bodies,
            [KeptBody {
                tenant: "acme".into(),
                hook: 7,
                ended_ms: 1005,
                headers: "{\"x-a\":\"1\"}".into(),
                body: vec![0xff, b'{', b'}'],
            }]
        );
        let empty = crate::store::LogEntry::default();
        assert_eq!(parse_log_entry(&empty).malformed, 1);
    }
}
