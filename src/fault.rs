//! Faults the integration tests inject into the real `ankusa` binary.
//!
//! Test-only switches do not go in the product config (CONTRIBUTING.md): each fault is an
//! environment variable honoured only by a binary built with the `fault-injection` cargo
//! feature, which is not a default feature. The README's test command enables it; a release
//! build ignores the variable (and logs that it does), so no user can set a fault by accident.

/// `ANKUSA_FAULT_WEDGE_CLAIM_LOOP=1`: the scheduler never claims, as if its claim loop were
/// wedged, so the leader's self-check can be exercised (tests/pool.rs).
const WEDGE_CLAIM_LOOP: &str = "ANKUSA_FAULT_WEDGE_CLAIM_LOOP";

/// Whether the claim loop plays wedged: read once per process, and logged when the variable
/// is set, whether this build honours it (`fault-injection`) or ignores it.
pub(crate) fn wedged_claim_loop() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| {
        if std::env::var_os(WEDGE_CLAIM_LOOP).as_deref() != Some(std::ffi::OsStr::new("1")) {
            return false;
        }
        if cfg!(feature = "fault-injection") {
            tracing::warn!("fault injected: {WEDGE_CLAIM_LOOP}=1, the scheduler never claims (tests only)");
            true
        } else {
            tracing::warn!(
                "{WEDGE_CLAIM_LOOP} is ignored: this binary was built without the fault-injection feature"
            );
            false
        }
    })
}
