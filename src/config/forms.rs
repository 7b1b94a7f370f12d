//! Forms of config values that the servers read too: a `Host` authority
//! (`admin.allowed_hosts`), a frame origin (`admin.portal_frame_ancestors`) and an ambient
//! credentials grant (`tenants.<id>.ambient_credentials`, which the sinks' egress check
//! matches). They live
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

/// Whether `g` is a valid `ambient_credentials` entry: an SQS queue ARN
/// `arn:<partition>:sqs:<region>:<account>:<queue>`, a Kinesis stream ARN
/// `arn:<partition>:kinesis:<region>:<account>:stream/<name>`, an EventBridge bus ARN
/// `arn:<partition>:events:<region>:<account>:event-bus/<name>`, or a Pub/Sub topic
/// `projects/<project>/topics/<topic>`, its last part possibly ending in `*` (a prefix; a
/// bare `*` in the account or project is not allowed, so a grant never spans every account).
pub fn valid_ambient_grant(g: &str) -> bool {
    let part = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    };
    let last = |s: &str| match s.strip_suffix('*') {
        Some(prefix) => prefix.is_empty() || part(prefix),
        None => part(s),
    };
    if let Some(rest) = g.strip_prefix("projects/") {
        return match rest.split_once("/topics/") {
            Some((project, topic)) => part(project) && last(topic),
            None => false,
        };
    }
    let parts: Vec<&str> = g.split(':').collect();
    let ["arn", partition, service, region, account, resource] = parts.as_slice() else {
        return false;
    };
    let resource_ok = match *service {
        "sqs" => last(resource),
        "kinesis" => resource.strip_prefix("stream/").is_some_and(last),
        // A partner bus's name has parts: `aws.partner/<partner>/<name>`.
        "events" => resource.strip_prefix("event-bus/").is_some_and(|bus| {
            let (path, name) = bus.rsplit_once('/').unwrap_or(("", bus));
            (path.is_empty() || path.split('/').all(part)) && last(name)
        }),
        _ => false,
    };
    partition.starts_with("aws")
        && part(partition)
        && part(region)
        && account.len() == 12
        && account.bytes().all(|b| b.is_ascii_digit())
        && resource_ok
}
