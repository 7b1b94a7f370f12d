//! Standard Webhooks signatures (standardwebhooks.com, as Svix signs) for the HTTP sink.
//!
//! Every attempt carries `webhook-id` (`msg_<message space>_<row id>`, the same on every retry
//! of a row and never another row's: [`crate::sinks::message_id`]),
//! `webhook-timestamp` (the attempt's own time by Redis' clock, seconds since the epoch, so a
//! worker whose clock is off still stamps a time receivers accept, and a retry hours
//! later is not refused as a replay) and, when the sink has a `signing_secret`,
//! `webhook-signature`: `v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">` under each
//! secret, space separated, so a receiver rotating secrets accepts either. The body signed is
//! the exact bytes sent.

use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig, STANDARD as B64};
use base64::engine::DecodePaddingMode;
use base64::Engine;

/// Secrets decode with or without `=` padding, as the reference libraries accept them.
const SECRET_B64: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// The prefix of a symmetric Standard Webhooks secret.
pub const SECRET_PREFIX: &str = "whsec_";

/// A decoded `whsec_…` secret.
#[derive(Clone)]
pub struct SigningKey(ring::hmac::Key);

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SigningKey(***)")
    }
}

impl SigningKey {
    /// Decode `whsec_<base64>`. The error never holds the secret.
    pub fn parse(secret: &str) -> Result<SigningKey, String> {
        let b64 = secret
            .strip_prefix(SECRET_PREFIX)
            .ok_or_else(|| format!("signing_secret: must be a {SECRET_PREFIX}<base64> secret"))?;
        let raw = SECRET_B64
            .decode(b64.trim())
            .map_err(|_| "signing_secret: the part after whsec_ is not valid base64".to_string())?;
        if raw.len() < 16 {
            return Err("signing_secret: must decode to at least 16 bytes".into());
        }
        Ok(SigningKey(ring::hmac::Key::new(
            ring::hmac::HMAC_SHA256,
            &raw,
        )))
    }

    /// The `v1,<base64>` signature of one message.
    pub fn sign(&self, id: &str, timestamp: u64, body: &[u8]) -> String {
        let mut ctx = ring::hmac::Context::with_key(&self.0);
        ctx.update(id.as_bytes());
        ctx.update(b".");
        ctx.update(timestamp.to_string().as_bytes());
        ctx.update(b".");
        ctx.update(body);
        format!("v1,{}", B64.encode(ctx.sign().as_ref()))
    }
}

/// The most signing secrets an entry may list: rotation needs the current one and the next
/// (a third covers a rotation started before the last ended). Each costs one HMAC of the
/// whole body on every attempt.
pub const MAX_SIGNING_SECRETS: usize = 4;

/// Bytes signed (body length × keys) past which the signatures are computed on tokio's
/// blocking pool rather than on a runtime thread, which renews leases and claims rows.
pub const SIGN_INLINE_MAX_BYTES: usize = 64 * 1024;

/// The `webhook-signature` header value: one signature per key, space separated.
pub fn signature_header(keys: &[SigningKey], id: &str, timestamp: u64, body: &[u8]) -> String {
    keys.iter()
        .map(|k| k.sign(id, timestamp, body))
        .collect::<Vec<_>>()
        .join(" ")
}

/// [`signature_header`] of `body`, computed off the async runtime's threads when it is large
/// (over [`SIGN_INLINE_MAX_BYTES`] signed), so a large hook under several secrets never
/// stalls the scheduler on the same thread.
pub async fn signature_header_off_runtime(
    keys: Vec<SigningKey>,
    id: String,
    timestamp: u64,
    body: bytes::Bytes,
) -> String {
    if body.len().saturating_mul(keys.len()) <= SIGN_INLINE_MAX_BYTES {
        return signature_header(&keys, &id, timestamp, &body);
    }
    let inline = (keys.clone(), id.clone(), body.clone());
    match tokio::task::spawn_blocking(move || signature_header(&keys, &id, timestamp, &body)).await
    {
        Ok(header) => header,
        // The blocking pool is shut down (the runtime is ending): sign here.
        Err(_) => signature_header(&inline.0, &inline.1, timestamp, &inline.2),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_match_the_standard_webhooks_reference_vector() {
        // The test vector of the Standard Webhooks reference libraries.
        let key = SigningKey::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let sig = key.sign(
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1614265330,
            br#"{"test": 2432232314}"#,
        );
        assert_eq!(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    }

    #[test]
    fn rotation_signs_once_per_key_and_bad_secrets_are_refused_without_echo() {
        let a = SigningKey::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let b = SigningKey::parse(&format!("whsec_{}", B64.encode([7u8; 32]))).unwrap();
        let h = signature_header(&[a, b], "1.0", 1, b"x");
        assert_eq!(h.split(' ').count(), 2);
        assert!(h.split(' ').all(|s| s.starts_with("v1,")));
        for bad in [
            "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "whsec_!!!notbase64",
            "whsec_YWJj",
        ] {
            let e = SigningKey::parse(bad).unwrap_err();
            assert!(!e.contains(bad), "{e}");
        }
    }
}
