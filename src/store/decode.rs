//! Decoding script replies and pipelined reads: status words, integers, per-key replies and
//! the stored hook hash.

use super::{StoreError, StoredHook};
use bytes::Bytes;
use fred::types::Value;

pub(super) fn status(v: &[Value]) -> &str {
    v.first().and_then(|s| s.as_str_ref()).unwrap_or("")
}

pub(super) trait ValueExt {
    fn as_str_ref(&self) -> Option<&str>;
    fn int(&self) -> Option<i64>;
    fn text(&self) -> String;
}

impl ValueExt for Value {
    fn as_str_ref(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            Value::Bytes(b) => std::str::from_utf8(b).ok(),
            _ => None,
        }
    }
    fn int(&self) -> Option<i64> {
        match self {
            Value::Integer(i) => Some(*i),
            Value::Double(d) => Some(*d as i64),
            _ => self.as_str_ref().and_then(|s| {
                s.parse::<i64>()
                    .ok()
                    .or_else(|| s.parse::<f64>().ok().map(|f| f as i64))
            }),
        }
    }
    fn text(&self) -> String {
        self.as_str_ref().map(str::to_string).unwrap_or_default()
    }
}

/// One script's reply, read by position strictly: a field that is missing or not
/// what the script promises is [`StoreError::Protocol`] naming the script and the position,
/// never a silent zero.
pub(super) struct Reply<'a> {
    script: &'static str,
    v: &'a [Value],
}

impl<'a> Reply<'a> {
    pub(super) fn new(script: &'static str, v: &'a [Value]) -> Self {
        Reply { script, v }
    }

    fn bad(&self, i: usize, what: &str) -> StoreError {
        let got = match self.v.get(i) {
            None => "nothing".to_string(),
            Some(x) => format!("{:?}", truncate_text(&x.text(), 32)),
        };
        StoreError::protocol(
            self.script,
            format!("field {i}: {what} expected, got {got}"),
        )
    }

    /// The integer at `i`.
    pub(super) fn int(&self, i: usize) -> Result<i64, StoreError> {
        self.v
            .get(i)
            .and_then(Value::int)
            .ok_or_else(|| self.bad(i, "an integer"))
    }

    /// The non-negative integer at `i`.
    pub(super) fn count(&self, i: usize) -> Result<u64, StoreError> {
        u64::try_from(self.int(i)?).map_err(|_| self.bad(i, "a count"))
    }

    /// The integer at `i`, where `-1` (or any negative) means none.
    pub(super) fn opt(&self, i: usize) -> Result<Option<i64>, StoreError> {
        Ok(Some(self.int(i)?).filter(|&n| n >= 0))
    }

    /// The text at `i`.
    pub(super) fn text(&self, i: usize) -> Result<String, StoreError> {
        self.v
            .get(i)
            .and_then(ValueExt::as_str_ref)
            .map(str::to_string)
            .ok_or_else(|| self.bad(i, "text"))
    }

    /// The bytes at `i` as text, invalid UTF-8 replaced (empty when absent or not bytes):
    /// for what a tenant or producer wrote, shown, never parsed.
    pub(super) fn lossy(&self, i: usize) -> String {
        self.v
            .get(i)
            .and_then(|x| x.as_bytes())
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .unwrap_or_default()
    }

    /// The fields from `i` on (none when the reply is shorter).
    pub(super) fn rest(&self, i: usize) -> &'a [Value] {
        &self.v[i.min(self.v.len())..]
    }
}

pub(super) fn array(script: &'static str, v: Value) -> Result<Vec<Value>, StoreError> {
    match v {
        Value::Array(a) => Ok(a),
        other => Err(StoreError::protocol(
            script,
            format!("not an array: {other:?}"),
        )),
    }
}

/// The first score of a `ZRANGE … WITHSCORES` reply, flat (RESP2) or nested (RESP3).
pub fn first_score(v: &Value) -> Option<i64> {
    let Value::Array(a) = v else { return None };
    match a.first()? {
        Value::Array(pair) => pair.get(1).and_then(Value::int),
        _ => a.get(1).and_then(Value::int),
    }
}

/// The fields of a hook hash read for delivery, in [`decode_hook`]'s order.
pub(super) const HOOK_FIELDS: [&str; 9] = ["b", "h", "t", "tn", "s", "k", "n", "cc", "et"];

/// Split a pipeline's replies into one result per key: a key's own error reply (it holds
/// another type: `WRONGTYPE`) is that key's `Err(text)`; anything else failing (connection,
/// timeout) fails the whole call, so a lost reply is never taken for a malformed key.
pub(super) fn per_key_replies<R>(
    replies: Vec<Result<R, fred::error::Error>>,
    expected: usize,
) -> Result<Vec<Result<R, String>>, StoreError> {
    let per_key = |e: &fred::error::Error| e.details().starts_with("WRONGTYPE");
    if replies.len() != expected {
        let e = replies.into_iter().find_map(Result::err);
        return Err(e.map(StoreError::from).unwrap_or_else(|| {
            StoreError::protocol("pipeline", format!("{expected} replies expected"))
        }));
    }
    replies
        .into_iter()
        .map(|r| match r {
            Ok(v) => Ok(Ok(v)),
            Err(e) if per_key(&e) => Ok(Err(e.details().to_string())),
            Err(e) => Err(StoreError::from(e)),
        })
        .collect()
}

/// Decode one hook of a `hooks.lua` reply: its [`HOOK_FIELDS`] then its body, or
/// `{'!', error}` for a malformed hook. Errors: [`StoreError::Protocol`] for another shape.
pub(super) fn decode_hook_reply(
    v: Value,
) -> Result<Option<Result<StoredHook, String>>, StoreError> {
    let Value::Array(mut a) = v else {
        return Err(StoreError::protocol("hooks", "a hook is not an array"));
    };
    if a.len() == 2 && a[0].as_str_ref() == Some("!") {
        return Ok(Some(Err(a[1].text())));
    }
    if a.len() != HOOK_FIELDS.len() + 1 {
        return Err(StoreError::protocol(
            "hooks",
            format!("{} values for a hook", a.len()),
        ));
    }
    let body = a.pop().unwrap_or(Value::Null);
    Ok(decode_hook(Value::Array(a), body))
}

/// Decode a hook read with [`HOOK_FIELDS`] and its body key's value: `None` when the hook
/// is gone (every field absent), `Some(Err(what))` naming the first field that is missing
/// or unreadable. The hash's own `b` (a hook committed before bodies moved apart)
/// is taken before the body key.
fn decode_hook(v: Value, body: Value) -> Option<Result<StoredHook, String>> {
    let Value::Array(mut f) = v else {
        return Some(Err("unexpected reply".into()));
    };
    if f.len() != HOOK_FIELDS.len() {
        return Some(Err("unexpected reply".into()));
    }
    if f.iter().all(|v| matches!(v, Value::Null)) {
        return None;
    }
    if matches!(f[0], Value::Null) {
        f[0] = body;
    }
    let bad = |i: usize| {
        let shown = match &f[i] {
            Value::Null => "missing".to_string(),
            v => format!("{:?} unreadable", truncate_text(&v.text(), 32)),
        };
        match i {
            0 => format!("body {shown}"),
            _ => format!("field {} {shown}", HOOK_FIELDS[i]),
        }
    };
    let text = |i: usize| f[i].as_str_ref().map(str::to_string).ok_or_else(|| bad(i));
    let hook = (|| {
        let body = match &f[0] {
            Value::Bytes(b) => b.clone(),
            Value::String(s) => Bytes::copy_from_slice(s.as_bytes()),
            _ => return Err(bad(0)),
        };
        f[6].int().ok_or_else(|| bad(6))?;
        Ok(StoredHook {
            body,
            headers: crate::sinks::ProducerHeaders::decode(f[1].text()),
            committed_at_ms: f[2].int().ok_or_else(|| bad(2))?,
            tenant: text(3)?,
            source: text(4)?,
            modules: text(5)?.split(',').map(str::to_string).collect(),
            claim_ref: f[7].as_str_ref().map(str::to_string),
            // Only a valid one (a raw script call could store anything): it goes into a
            // header or attribute as it is.
            event_type: f[8]
                .as_str_ref()
                .filter(|e| crate::model::check_event_type(e).is_ok())
                .map(str::to_string),
        })
    })();
    Some(hook)
}

pub(super) fn truncate_text(s: &str, max: usize) -> String {
    crate::sinks::truncate(s.to_string(), max)
}
