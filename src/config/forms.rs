//! Forms of config values that the servers read too: a `Host` authority
//! (`admin.allowed_hosts`) and a frame origin (`admin.portal_frame_ancestors`). They live
//! with the config so that its validation and the servers agree on one reading.

/// `name[:port]` (IPv6 literals in brackets) → its parts; `None` when it is not a plain
/// authority (userinfo, a path, an empty name, a bad port).
pub fn split_host(host: &str) -> Option<(&str, Option<u16>)> {
    let a: http::uri::Authority = host.parse().ok()?;
    if a.as_str().contains('@') || a.host().is_empty() {
        return None;
    }
    let name = &host[..a.host().len()];
    match host[a.host().len()..].strip_prefix(':') {
        None if host.len() == name.len() => Some((name, None)),
        Some(p) => Some((name, Some(p.parse().ok()?))),
        None => None,
    }
}

/// `o` as a `frame-ancestors` source (`scheme://host[:port]`), if it is an http(s) origin
/// with nothing else (what `admin.portal_frame_ancestors` entries must be).
pub fn frame_origin(o: &str) -> Option<String> {
    let u = url::Url::parse(o).ok()?;
    let plain = matches!(u.scheme(), "http" | "https")
        && u.username().is_empty()
        && u.password().is_none()
        && u.path() == "/"
        && u.query().is_none()
        && u.fragment().is_none()
        && !o.contains('*')
        && u.host_str().is_some();
    plain.then(|| u.origin().ascii_serialization())
}
