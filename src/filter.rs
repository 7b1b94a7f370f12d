//! A sink entry's filter: which hooks the entry takes, by event type pattern
//! and by predicates on the body (JSON pointers) and the producer's headers.
//!
//! The commit script decides it first (`gate_ok` in `lua/commit.lua`: a refused entry costs
//! no row), and the dispatch loop again when it binds a row to its entry (the filter as it
//! is now, after edits). Both must agree: [`EventFilter::matches_hook`] is the reference the
//! script mirrors, and `tests/filters.rs` checks the two against an independent evaluation
//! on real GitHub payloads.
//!
//! The cost is bounded: at most [`MAX_PREDICATES`] leaves, [`MAX_DEPTH`] levels of
//! `all`/`any`/`not`, and only the first [`FILTER_BODY_MAX_BYTES`] of a body are examined
//! (a longer body, or one that is not JSON, fails every body predicate).

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

/// The longest event type and filter pattern, bytes.
pub const EVENT_TYPE_MAX_BYTES: usize = 128;
/// Event type patterns per filter.
pub const MAX_PATTERNS: usize = 64;
/// Predicates (leaves) per filter, counted through `all`/`any`/`not`.
pub const MAX_PREDICATES: usize = 32;
/// Nesting of `all`/`any`/`not` (a leaf alone is depth 1).
pub const MAX_DEPTH: usize = 4;
/// Items of one `all`/`any` list.
pub const MAX_LIST: usize = 16;
/// Values of one `in` list.
pub const MAX_IN: usize = 64;
/// The longest pointer, header name or string operand, bytes.
pub const MAX_TEXT: usize = 256;
/// The largest body a body predicate examines, bytes: a larger body fails every body
/// predicate (the commit script decodes the body once per commit, inside Redis).
pub const FILTER_BODY_MAX_BYTES: usize = 64 * 1024;

/// Check an event type a producer sets: 1..=128 bytes of `[A-Za-z0-9_.:/-]` (no `*`).
pub fn check_event_type(value: &str) -> Result<(), String> {
    let ok = !value.is_empty()
        && value.len() <= EVENT_TYPE_MAX_BYTES
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'/' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "event type {value:?}: must be 1..={EVENT_TYPE_MAX_BYTES} bytes of [A-Za-z0-9_.:/-]"
        ))
    }
}

/// An entry's filter: a hook passes when its event type matches one of `event_types`
/// (when given) and `match` holds (when given). At least one of the two is set.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventFilter {
    /// Event type patterns, 0..=64 (empty: any event type, or none): an exact type (`push`);
    /// `*` in place of a dot-separated segment matches any one segment (`*.created`,
    /// `order.*.failed`); a trailing `.*` matches the prefix itself and anything below it
    /// (`pull_request.*` matches `pull_request` and `pull_request.opened`, not
    /// `pull_request_review`); `*` alone matches every type. A hook without an event type
    /// matches no pattern.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub event_types: Vec<String>,
    /// A predicate on the body and the producer's headers; `None`: every hook.
    #[serde(default, rename = "match", skip_serializing_if = "Option::is_none")]
    pub predicate: Option<Predicate>,
}

/// A predicate of a filter: exactly one of `all`, `any`, `not`, or a leaf (`body` or
/// `header`, with exactly one operator).
///
/// Leaf semantics: `body` is an RFC 6901 JSON pointer into the body (`""`: the whole
/// document), `header` a producer header name (case-insensitive; its value is a string).
/// A value that is absent (no such pointer or header) satisfies only `exists: false`; a
/// body that is not JSON, or is over [`FILTER_BODY_MAX_BYTES`], fails every body leaf.
/// `eq`/`ne`/`in` compare scalars of the same JSON type (numbers as numbers; an object or
/// array never equals anything); `ne` holds for a present value not equal; `prefix` holds
/// for a string starting with it; `gt`/`lt` for a number (a header value parsed as one).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Predicate {
    /// Every predicate of the list holds (1..=16).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub all: Option<Vec<Predicate>>,
    /// Some predicate of the list holds (1..=16).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub any: Option<Vec<Predicate>>,
    /// The predicate does not hold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not: Option<Box<Predicate>>,
    /// A leaf on the body: the JSON pointer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// A leaf on a producer header: its name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<String>,
    /// The value equals this scalar.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub eq: Option<Value>,
    /// The value is present and differs from this scalar.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub ne: Option<Value>,
    /// The value equals one of these scalars (1..=64).
    #[serde(default, rename = "in", skip_serializing_if = "Option::is_none")]
    pub one_of: Option<Vec<Value>>,
    /// The value is present (`true`) or absent (`false`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exists: Option<bool>,
    /// The value is a string starting with this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// The value is a number greater than this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gt: Option<serde_json::Number>,
    /// The value is a number less than this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lt: Option<serde_json::Number>,
}

impl Predicate {
    /// The header names its leaves read (lowercase, each once, in order of appearance).
    pub fn header_names(&self) -> Vec<String> {
        let mut names = Vec::new();
        self.collect_headers(&mut names);
        names
    }

    fn collect_headers(&self, names: &mut Vec<String>) {
        if let Some(h) = &self.header {
            let h = h.to_ascii_lowercase();
            if !names.contains(&h) {
                names.push(h);
            }
        }
        for p in self.all.iter().chain(self.any.iter()).flatten() {
            p.collect_headers(names);
        }
        if let Some(p) = &self.not {
            p.collect_headers(names);
        }
    }
}

/// `"eq": null` is an operand (JSON null), not an absent field.
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

impl EventFilter {
    /// A filter on event type patterns only.
    pub fn types(patterns: Vec<String>) -> EventFilter {
        EventFilter {
            event_types: patterns,
            predicate: None,
        }
    }

    /// Check the filter within its bounds; the error starts with the field's name
    /// (`event_types`, `match.all[1].body`…).
    pub fn validate(&self) -> Result<(), String> {
        if self.event_types.is_empty() && self.predicate.is_none() {
            return Err("event_types: give event_types, match, or both".into());
        }
        if self.event_types.len() > MAX_PATTERNS {
            return Err(format!("event_types: at most {MAX_PATTERNS} patterns"));
        }
        for p in &self.event_types {
            check_pattern(p).map_err(|e| format!("event_types: {e}"))?;
        }
        if let Some(p) = &self.predicate {
            let mut leaves = 0;
            p.validate("match", 1, &mut leaves)?;
        }
        Ok(())
    }

    /// Whether a hook of `event_type` (`None`: the hook has none) passes the event type
    /// patterns (any, when there are none).
    pub fn matches(&self, event_type: Option<&str>) -> bool {
        if self.event_types.is_empty() {
            return true;
        }
        let Some(et) = event_type else { return false };
        self.event_types.iter().any(|p| pattern_matches(p, et))
    }

    /// Whether a hook passes the whole filter: its event type, its `body` and its producer
    /// `headers` (JSON object text, `""` for none). The commit script's `gate_ok` decides
    /// the same.
    pub fn matches_hook(&self, event_type: Option<&str>, body: &[u8], headers: &str) -> bool {
        if !self.matches(event_type) {
            return false;
        }
        let Some(p) = &self.predicate else {
            return true;
        };
        let mut doc = Doc {
            body,
            headers,
            json: None,
            hdrs: None,
        };
        p.eval(&mut doc)
    }

    /// This filter as the commit script's gate: the array of patterns (the form scripts
    /// before content filters read) when that says it all, else `{"t": patterns, "m":
    /// predicate}` (a predicate, or a wildcard segment an older script would misread).
    pub(crate) fn gate_json(&self) -> Value {
        match &self.predicate {
            None if self.event_types.iter().all(|p| !legacy_unknown(p)) => {
                serde_json::json!(self.event_types)
            }
            _ => {
                let mut g = serde_json::Map::new();
                if !self.event_types.is_empty() {
                    g.insert("t".into(), serde_json::json!(self.event_types));
                }
                if let Some(p) = &self.predicate {
                    g.insert(
                        "m".into(),
                        serde_json::to_value(p).unwrap_or(Value::Bool(false)),
                    );
                }
                Value::Object(g)
            }
        }
    }
}

/// A pattern an older commit script (exact and trailing `.*` only) would misread.
fn legacy_unknown(p: &str) -> bool {
    p.strip_suffix(".*").unwrap_or(p).contains('*') || p == "*"
}

/// Check one event type pattern: segments of `[A-Za-z0-9_:/-]` or `*`, 1..=128 bytes.
fn check_pattern(p: &str) -> Result<(), String> {
    if p == "*" {
        return Ok(());
    }
    if p.len() > EVENT_TYPE_MAX_BYTES || p.is_empty() {
        return Err(format!("pattern {p:?}: 1..={EVENT_TYPE_MAX_BYTES} bytes"));
    }
    for seg in p.split('.') {
        if seg == "*" {
            continue;
        }
        if seg.contains('*') {
            return Err(format!(
                "pattern {p:?}: `*` stands for a whole segment (`*.created`, `order.*.failed`)"
            ));
        }
    }
    check_event_type(&p.replace('*', "x")).map_err(|_| {
        format!("pattern {p:?}: must be 1..={EVENT_TYPE_MAX_BYTES} bytes of [A-Za-z0-9_.:/-] and `*` segments")
    })
}

/// One pattern against one event type (see [`EventFilter::event_types`]).
pub fn pattern_matches(p: &str, et: &str) -> bool {
    if p == "*" {
        return true;
    }
    if !p.contains('*') {
        return p == et;
    }
    let ps: Vec<&str> = p.split('.').collect();
    let es: Vec<&str> = et.split('.').collect();
    let rest = ps.len() >= 2 && ps[ps.len() - 1] == "*";
    let fixed = if rest { ps.len() - 1 } else { ps.len() };
    if (rest && es.len() < fixed) || (!rest && es.len() != fixed) {
        return false;
    }
    ps[..fixed]
        .iter()
        .zip(&es)
        .all(|(p, e)| *p == "*" || p == e)
}

/// What a predicate is evaluated on, decoded once and only when asked.
struct Doc<'a> {
    body: &'a [u8],
    headers: &'a str,
    json: Option<Option<Value>>,
    hdrs: Option<Option<serde_json::Map<String, Value>>>,
}

impl Doc<'_> {
    fn json(&mut self) -> Option<&Value> {
        if self.json.is_none() {
            let v = if self.body.len() > FILTER_BODY_MAX_BYTES {
                None
            } else {
                serde_json::from_slice::<Value>(self.body).ok()
            };
            self.json = Some(v);
        }
        self.json.as_ref().and_then(Option::as_ref)
    }

    fn header(&mut self, name: &str) -> Option<Value> {
        if self.hdrs.is_none() {
            self.hdrs = Some(match serde_json::from_str::<Value>(self.headers) {
                Ok(Value::Object(m)) => Some(m),
                _ => None,
            });
        }
        let m = self.hdrs.as_ref().and_then(Option::as_ref)?;
        m.iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| match v {
                Value::String(s) => Value::String(s.clone()),
                other => Value::String(other.to_string()),
            })
    }
}

/// RFC 6901: `""` the whole document, else `/`-separated tokens with `~1` = `/`, `~0` = `~`;
/// an array token is a decimal index.
fn pointer<'a>(doc: &'a Value, ptr: &str) -> Option<&'a Value> {
    doc.pointer(ptr)
}

/// Two scalars of the same JSON type and value (numbers as f64, as the script compares).
fn scalar_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::String(x), Value::String(y)) => x == y,
        (Value::Bool(x), Value::Bool(y)) => x == y,
        (Value::Null, Value::Null) => true,
        _ => false,
    }
}

fn is_scalar(v: &Value) -> bool {
    !matches!(v, Value::Array(_) | Value::Object(_))
}

impl Predicate {
    fn validate(&self, at: &str, depth: usize, leaves: &mut usize) -> Result<(), String> {
        if depth > MAX_DEPTH {
            return Err(format!(
                "{at}: nested deeper than {MAX_DEPTH} levels of all/any/not"
            ));
        }
        let forms = [
            self.all.is_some(),
            self.any.is_some(),
            self.not.is_some(),
            self.body.is_some() || self.header.is_some(),
        ];
        let ops = [
            self.eq.is_some(),
            self.ne.is_some(),
            self.one_of.is_some(),
            self.exists.is_some(),
            self.prefix.is_some(),
            self.gt.is_some(),
            self.lt.is_some(),
        ];
        let op_count = ops.iter().filter(|x| **x).count();
        if forms.iter().filter(|x| **x).count() != 1 {
            return Err(format!(
                "{at}: one of all, any, not, or a body/header leaf, exactly"
            ));
        }
        for (name, list) in [("all", &self.all), ("any", &self.any)] {
            if let Some(list) = list {
                if op_count > 0 {
                    return Err(format!("{at}: {name} takes no operator beside it"));
                }
                if list.is_empty() || list.len() > MAX_LIST {
                    return Err(format!("{at}.{name}: 1..={MAX_LIST} predicates"));
                }
                for (i, p) in list.iter().enumerate() {
                    p.validate(&format!("{at}.{name}[{i}]"), depth + 1, leaves)?;
                }
                return Ok(());
            }
        }
        if let Some(p) = &self.not {
            if op_count > 0 {
                return Err(format!("{at}: not takes no operator beside it"));
            }
            return p.validate(&format!("{at}.not"), depth + 1, leaves);
        }
        *leaves += 1;
        if *leaves > MAX_PREDICATES {
            return Err(format!("{at}: more than {MAX_PREDICATES} predicates"));
        }
        let on_header = match (&self.body, &self.header) {
            (Some(_), Some(_)) => {
                return Err(format!("{at}: a leaf reads body or header, not both"))
            }
            (Some(p), None) => {
                if !(p.is_empty() || p.starts_with('/')) || p.len() > MAX_TEXT {
                    return Err(format!(
                        "{at}.body: {p:?} must be a JSON pointer (empty or starting with '/'), at most {MAX_TEXT} bytes"
                    ));
                }
                false
            }
            (None, Some(h)) => {
                let token = !h.is_empty()
                    && h.len() <= MAX_TEXT
                    && h.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
                if !token {
                    return Err(format!("{at}.header: {h:?} is not a header name"));
                }
                true
            }
            (None, None) => unreachable!("a leaf has body or header"),
        };
        if op_count != 1 {
            return Err(format!(
                "{at}: exactly one of eq, ne, in, exists, prefix, gt, lt"
            ));
        }
        let check = |name: &str, v: &Value| -> Result<(), String> {
            if !is_scalar(v) {
                return Err(format!("{at}.{name}: a string, number, boolean or null"));
            }
            if on_header && !v.is_string() {
                return Err(format!("{at}.{name}: a header value is a string"));
            }
            if v.as_str().is_some_and(|s| s.len() > MAX_TEXT) {
                return Err(format!("{at}.{name}: at most {MAX_TEXT} bytes"));
            }
            Ok(())
        };
        if let Some(v) = &self.eq {
            check("eq", v)?;
        }
        if let Some(v) = &self.ne {
            check("ne", v)?;
        }
        if let Some(list) = &self.one_of {
            if list.is_empty() || list.len() > MAX_IN {
                return Err(format!("{at}.in: 1..={MAX_IN} values"));
            }
            for v in list {
                check("in", v)?;
            }
        }
        if let Some(p) = &self.prefix {
            if p.len() > MAX_TEXT {
                return Err(format!("{at}.prefix: at most {MAX_TEXT} bytes"));
            }
        }
        for (name, n) in [("gt", &self.gt), ("lt", &self.lt)] {
            if n.as_ref()
                .is_some_and(|n| !n.as_f64().is_some_and(f64::is_finite))
            {
                return Err(format!("{at}.{name}: a finite number"));
            }
        }
        Ok(())
    }

    fn eval(&self, doc: &mut Doc<'_>) -> bool {
        if let Some(list) = &self.all {
            return list.iter().all(|p| p.eval(doc));
        }
        if let Some(list) = &self.any {
            return list.iter().any(|p| p.eval(doc));
        }
        if let Some(p) = &self.not {
            return !p.eval(doc);
        }
        let value: Option<Value> = if let Some(ptr) = &self.body {
            let Some(json) = doc.json() else {
                return false;
            };
            pointer(json, ptr).cloned()
        } else if let Some(h) = &self.header {
            doc.header(h)
        } else {
            return false;
        };
        if let Some(want) = self.exists {
            return value.is_some() == want;
        }
        let Some(v) = value else { return false };
        if let Some(w) = &self.eq {
            return scalar_eq(&v, w);
        }
        if let Some(w) = &self.ne {
            return !scalar_eq(&v, w);
        }
        if let Some(list) = &self.one_of {
            return list.iter().any(|w| scalar_eq(&v, w));
        }
        if let Some(p) = &self.prefix {
            return v.as_str().is_some_and(|s| s.starts_with(p.as_str()));
        }
        let number = match &v {
            Value::Number(n) => n.as_f64(),
            Value::String(s) if self.header.is_some() => s.trim().parse::<f64>().ok(),
            _ => None,
        };
        let Some(x) = number else { return false };
        if let Some(n) = self.gt.as_ref().and_then(|n| n.as_f64()) {
            return x > n;
        }
        if let Some(n) = self.lt.as_ref().and_then(|n| n.as_f64()) {
            return x < n;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filter(json: &str) -> EventFilter {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn patterns_match_segments_and_trailing_prefixes() {
        let cases = [
            ("push", "push", true),
            ("push", "push.x", false),
            ("pull_request.*", "pull_request", true),
            ("pull_request.*", "pull_request.opened", true),
            ("pull_request.*", "pull_request.a.b", true),
            ("pull_request.*", "pull_request_review", false),
            ("*.created", "repo.created", true),
            ("*.created", "created", false),
            ("*.created", "a.b.created", false),
            ("order.*.failed", "order.payment.failed", true),
            ("order.*.failed", "order.failed", false),
            ("*", "anything.at.all", true),
            ("*.*", "x", true),
        ];
        for (p, et, want) in cases {
            check_pattern(p).unwrap();
            assert_eq!(pattern_matches(p, et), want, "{p} on {et}");
        }
        for bad in ["pre*", "a.b*.c", "", "a b"] {
            assert!(check_pattern(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn predicates_read_the_body_and_headers() {
        let body =
            br#"{"action":"opened","n":5,"pr":{"draft":false,"labels":[{"name":"bug"}]},"x":null}"#;
        let headers = r#"{"X-Region":"eu-west","X-Size":"12"}"#;
        let yes = [
            r#"{"match":{"body":"/action","eq":"opened"}}"#,
            r#"{"match":{"body":"/pr/labels/0/name","in":["bug","feature"]}}"#,
            r#"{"match":{"body":"/n","gt":4}}"#,
            r#"{"match":{"body":"/x","eq":null}}"#,
            r#"{"match":{"body":"/missing","exists":false}}"#,
            r#"{"match":{"body":"/action","ne":"closed"}}"#,
            r#"{"match":{"header":"x-region","prefix":"eu-"}}"#,
            r#"{"match":{"header":"x-size","lt":13}}"#,
            r#"{"match":{"all":[{"body":"/pr/draft","eq":false},{"not":{"body":"/n","eq":6}}]}}"#,
        ];
        for f in yes {
            let f = filter(f);
            f.validate().unwrap();
            assert!(f.matches_hook(None, body, headers), "{f:?}");
        }
        let no = [
            r#"{"match":{"body":"/missing","ne":"x"}}"#,
            r#"{"match":{"body":"/n","eq":"5"}}"#,
            r#"{"match":{"body":"/pr","eq":{"a":1}}}"#,
            r#"{"match":{"any":[{"header":"x-region","eq":"us"},{"body":"/n","lt":5}]}}"#,
            r#"{"event_types":["push"],"match":{"body":"/n","gt":1}}"#,
        ];
        for f in no {
            let f = filter(f);
            assert!(!f.matches_hook(None, body, headers), "{f:?}");
        }
        // A body that is not JSON fails body leaves, passes header ones.
        let f = filter(r#"{"match":{"body":"","exists":true}}"#);
        assert!(!f.matches_hook(None, b"not json", headers));
        let f = filter(r#"{"match":{"header":"x-region","exists":true}}"#);
        assert!(f.matches_hook(None, b"not json", headers));
    }

    #[test]
    fn bounds_are_refused_with_the_field_named() {
        let e = filter(r#"{"match":{"body":"action","eq":1}}"#)
            .validate()
            .unwrap_err();
        assert!(e.starts_with("match.body"), "{e}");
        let e = filter(r#"{"match":{"all":[{"body":"/a","eq":1,"ne":2}]}}"#)
            .validate()
            .unwrap_err();
        assert!(e.starts_with("match.all[0]"), "{e}");
        let leaf = r#"{"body":"/a","exists":true}"#;
        let many = format!(
            r#"{{"match":{{"any":[{{"any":[{}]}},{{"any":[{}]}},{{"any":[{}]}}]}}}}"#,
            [leaf; 12].join(","),
            [leaf; 12].join(","),
            [leaf; 12].join(",")
        );
        let e = filter(&many).validate().unwrap_err();
        assert!(e.contains("more than 32 predicates"), "{e}");
        let deep = r#"{"match":{"not":{"not":{"not":{"not":{"body":"/a","exists":true}}}}}}"#;
        assert!(filter(deep).validate().unwrap_err().contains("deeper"));
        let e = filter(r#"{"match":{"header":"x","eq":1}}"#)
            .validate()
            .unwrap_err();
        assert!(e.contains("header value is a string"), "{e}");
        assert!(filter("{}").validate().is_err());
        assert!(serde_json::from_str::<EventFilter>(r#"{"match":{"body":"/a","gte":1}}"#).is_err());
    }
}
