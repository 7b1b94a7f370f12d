//! What a sink sends for one hook: its body, or the reference of its claim-checked copy
//! (`crate::claim_check` stores it; the sinks only carry the reference).

use bytes::Bytes;

/// What a sink sends for one hook: the body itself, or a reference to its checked-in copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Payload {
    /// The body, exactly as committed.
    Inline(Bytes),
    /// The body was checked in: its reference and its size in bytes.
    Checked {
        /// `s3://bucket/key` or `file:///dir/key`.
        url: String,
        /// The body's size, bytes.
        size: usize,
    },
}

/// `(bucket, key)` of an `s3://bucket/key` reference; `None` for other stores.
pub fn s3_parts(url: &str) -> Option<(String, String)> {
    let (bucket, key) = url.strip_prefix("s3://")?.split_once('/')?;
    (!bucket.is_empty() && !key.is_empty()).then(|| (bucket.to_string(), key.to_string()))
}

/// The pointer sent where no standard format applies (Pub/Sub, `file://` stores):
/// `{"ankusaClaimCheck":{"url":"…","size":N}}`.
pub fn generic_pointer(url: &str, size: usize) -> String {
    serde_json::json!({"ankusaClaimCheck": {"url": url, "size": size}}).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn s3_references_split_into_bucket_and_key() {
        assert_eq!(
            s3_parts("s3://b/ankusa/x/t/1-ab"),
            Some(("b".into(), "ankusa/x/t/1-ab".into()))
        );
        assert_eq!(s3_parts("file:///tmp/x"), None);
        assert_eq!(s3_parts("s3://b"), None);
    }
}
