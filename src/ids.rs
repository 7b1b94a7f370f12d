//! Tenant and source ids: one check, `[A-Za-z0-9_.-]{1,128}`, used by the domain, the
//! config and the store alike (a leaf module, so the config need not use the domain).

/// Why an id was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind} id {value:?}: must match [A-Za-z0-9_.-]{{1,128}}")]
pub struct BadId {
    /// `tenant` or `source`.
    pub kind: &'static str,
    /// The value given.
    pub value: String,
}

/// Check a tenant or source id: `[A-Za-z0-9_.-]{1,128}`, so ids never need escaping in keys.
pub fn check_id(kind: &'static str, value: &str) -> Result<(), BadId> {
    let ok = !value.is_empty()
        && value.len() <= 128
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(BadId {
            kind,
            value: value.to_string(),
        })
    }
}
