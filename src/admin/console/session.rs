//! The console's and portal's login sessions, in this worker's memory: two tables (console,
//! portal), each bounded, and a bound per holder so one holder never pushes out another.

use super::{link, Area};
use crate::config::{frame_origin, AdminConfig};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a login session lives (a portal link's session ends with the link, sooner).
pub const SESSION_TTL: Duration = Duration::from_secs(8 * 3600);
/// Sessions one worker keeps at most per site (console, portal: two tables, so portal
/// sessions never push out the operator's); past it the expired ones go, then the oldest.
const SESSIONS_MAX: usize = 10_000;
/// Sessions one holder keeps at most (the operator; one tenant token; one tenant's portal
/// links): past it that holder's own oldest session goes, nobody else's. One portal link
/// opened in a loop cannot fill the table.
pub const SESSIONS_PER_HOLDER_MAX: usize = 100;

/// What a session stands for.
#[derive(Clone)]
pub(super) enum Cred {
    /// The operator token was given.
    Operator,
    /// A tenant token, checked again on every request (a revoke ends the session).
    Token(String),
    /// A portal link of this tenant, until its expiry.
    Link { tenant: String, expires_at_ms: i64 },
}

impl Cred {
    /// Who holds the session, for [`SESSIONS_PER_HOLDER_MAX`]: the operator, one token, or
    /// one tenant's links.
    fn holder(&self) -> String {
        match self {
            Cred::Operator => "operator".into(),
            Cred::Token(t) => format!("token:{t}"),
            Cred::Link { tenant, .. } => format!("link:{tenant}"),
        }
    }
}

struct Session {
    holder: String,
    /// Order of opening (the holder's oldest goes first).
    born: u64,
    cred: Cred,
    csrf: String,
    expires: Instant,
}

/// Sessions, the portal link key and framing of one admin server.
pub struct Console {
    pub(super) operator_set: bool,
    pub(super) link_key: Option<ring::hmac::Key>,
    pub(super) frame_ancestors: Vec<String>,
    /// The console's sessions, then the portal's.
    sessions: [Mutex<HashMap<String, Session>>; 2],
    opened: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for Console {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Console")
            .field("frame_ancestors", &self.frame_ancestors)
            .finish_non_exhaustive()
    }
}

impl Console {
    /// The console of a listener configured by `admin`: portal links need `admin.token`
    /// (without it a link's tenant session would narrow nothing) and
    /// `admin.portal_link_key`, which signs them.
    pub fn new(admin: &AdminConfig) -> Console {
        Console {
            operator_set: admin.token.is_some(),
            link_key: admin
                .portal_link_key
                .as_deref()
                .filter(|_| admin.token.is_some())
                .map(link::key),
            frame_ancestors: admin
                .portal_frame_ancestors
                .iter()
                .filter_map(|o| frame_origin(o))
                .collect(),
            sessions: [Mutex::new(HashMap::new()), Mutex::new(HashMap::new())],
            opened: std::sync::atomic::AtomicU64::new(0),
        }
    }

    fn table(&self, area: Area) -> std::sync::MutexGuard<'_, HashMap<String, Session>> {
        let t = match area {
            Area::Ui => &self.sessions[0],
            Area::Portal => &self.sessions[1],
        };
        t.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn open(&self, area: Area, cred: Cred, ttl: Duration) -> (String, String) {
        let id = random_token();
        let csrf = random_token();
        let holder = cred.holder();
        let mut sessions = self.table(area);
        let now = Instant::now();
        let held: Vec<(&String, &Session)> = sessions
            .iter()
            .filter(|(_, s)| s.holder == holder)
            .collect();
        if held.len() >= SESSIONS_PER_HOLDER_MAX {
            // The holder's own: its expired sessions, else its oldest.
            let gone: Vec<String> = match held.iter().any(|(_, s)| s.expires <= now) {
                true => held
                    .iter()
                    .filter(|(_, s)| s.expires <= now)
                    .map(|(k, _)| (*k).clone())
                    .collect(),
                false => held
                    .iter()
                    .min_by_key(|(_, s)| s.born)
                    .map(|(k, _)| vec![(*k).clone()])
                    .unwrap_or_default(),
            };
            for k in gone {
                sessions.remove(&k);
            }
        }
        if sessions.len() >= SESSIONS_MAX {
            sessions.retain(|_, s| s.expires > now);
            if sessions.len() >= SESSIONS_MAX {
                if let Some(oldest) = sessions
                    .iter()
                    .min_by_key(|(_, s)| s.expires)
                    .map(|(k, _)| k.clone())
                {
                    sessions.remove(&oldest);
                }
            }
        }
        sessions.insert(
            id.clone(),
            Session {
                holder,
                born: self
                    .opened
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed),
                cred,
                csrf: csrf.clone(),
                expires: Instant::now() + ttl.min(SESSION_TTL),
            },
        );
        (id, csrf)
    }

    pub(super) fn session(&self, area: Area, id: &str) -> Option<(Cred, String)> {
        let mut sessions = self.table(area);
        match sessions.get(id) {
            Some(s) if s.expires > Instant::now() => Some((s.cred.clone(), s.csrf.clone())),
            Some(_) => {
                sessions.remove(id);
                None
            }
            None => None,
        }
    }

    /// End `area`'s session `id` (an id of the other site's is not touched).
    pub(super) fn close(&self, area: Area, id: &str) {
        self.table(area).remove(id);
    }
}

/// 32 random bytes, hex.
pub(super) fn random_token() -> String {
    use rand::RngCore;
    let mut b = [0u8; 32];
    rand::rng().fill_bytes(&mut b);
    hex::encode(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_holder_never_pushes_out_another_and_the_two_sites_keep_apart() {
        let console = Console::new(&AdminConfig::default());
        let link = |t: &str| Cred::Link {
            tenant: t.into(),
            expires_at_ms: i64::MAX,
        };
        let (operator, _) = console.open(Area::Ui, Cred::Operator, SESSION_TTL);
        let (other, _) = console.open(Area::Portal, link("other"), SESSION_TTL);
        let mut flood = Vec::new();
        for _ in 0..(SESSIONS_PER_HOLDER_MAX * 3) {
            flood.push(console.open(Area::Portal, link("acme"), SESSION_TTL).0);
        }
        // acme's link opened 300 times holds 100 sessions, its newest; nobody else lost one.
        assert_eq!(
            console.table(Area::Portal).len(),
            SESSIONS_PER_HOLDER_MAX + 1
        );
        assert!(console.session(Area::Portal, &flood[0]).is_none());
        assert!(console
            .session(Area::Portal, flood.last().unwrap())
            .is_some());
        assert!(console.session(Area::Portal, &other).is_some());
        assert!(console.session(Area::Ui, &operator).is_some());
        // A portal session's id under the console's cookie is nothing there, and closing it
        // there ends nothing.
        assert!(console.session(Area::Ui, &other).is_none());
        console.close(Area::Ui, &other);
        assert!(console.session(Area::Portal, &other).is_some());
    }
}
