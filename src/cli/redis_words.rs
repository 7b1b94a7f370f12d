//! Redis failures in plain words for a person at a terminal: where (the address, with the
//! password redacted), what happened, and what to do — instead of the client library's
//! Debug text (`IO Error: Os { code: 111, kind: ConnectionRefused, … }`).

use ankusa::store::{CommitError, RedisFailure, StoreError};
use ankusa::Error;
use std::sync::OnceLock;

/// The Redis URL of the command (redacted), once its config is loaded.
static ADDRESS: OnceLock<String> = OnceLock::new();

/// Remember the Redis URL the command talks to, for [`plain`]; the password is redacted here.
pub fn remember(url: &str) {
    let _ = ADDRESS.set(ankusa::config::redact_url(url));
}

/// `e` with a Redis failure rewritten by [`describe`]; other errors unchanged.
pub fn plain(e: Error) -> Error {
    let url = ADDRESS.get().map_or("(redis.url)", String::as_str);
    match e {
        Error::Store(s) | Error::Commit(CommitError::Store(s)) if s.redis_failure().is_some() => {
            describe(s, url)
        }
        other => other,
    }
}

/// A Redis client failure at `url` (already redacted) as an error whose message says what
/// to do: [`Error::BadRequest`] (exit 2) for a URL or config the client refuses,
/// [`Error::Unavailable`] (exit 3) otherwise. Any other store error is returned as it is.
pub fn describe(e: StoreError, url: &str) -> Error {
    let Some((failure, reason)) = e.redis_failure() else {
        return Error::Store(e);
    };
    let fix = "point ankusa at your Redis with --redis-url, ANKUSA_REDIS__URL or redis.url in the config file";
    match failure {
        RedisFailure::Unreachable => Error::Unavailable(format!(
            "cannot reach Redis at {url}: {reason}. Is redis-server running and listening there? If not there, {fix}"
        )),
        RedisFailure::Timeout => Error::Unavailable(format!(
            "Redis at {url} did not answer in time ({reason}). Check the address and the network, or raise redis.command_timeout_ms; {fix}"
        )),
        RedisFailure::Auth => Error::Unavailable(format!(
            "Redis at {url} refused the credentials ({reason}). Put the right user:password in redis.url (redis://user:password@host:port)"
        )),
        RedisFailure::BadUrl => Error::BadRequest(format!(
            "redis.url {url} is not usable ({reason}); expected {}", ankusa::store::url::SUPPORTED_FORMS
        )),
        RedisFailure::Other => Error::Unavailable(format!("Redis at {url} failed: {reason}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_connection_names_the_address_and_what_to_do() {
        let io = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let os = std::io::Error::from_raw_os_error(111);
        for e in [io, os] {
            let msg = describe(StoreError::Redis(e.into()), "redis://:***@db:6379").to_string();
            assert!(
                msg.contains("cannot reach Redis at redis://:***@db:6379"),
                "{msg}"
            );
            assert!(msg.contains("--redis-url"), "{msg}");
            assert!(!msg.contains("Os {"), "{msg}");
        }
    }
}
