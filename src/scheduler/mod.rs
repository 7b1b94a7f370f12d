//! The scheduler's pure decisions: windows and slots, circuit breakers, backoff, rate
//! limits. No I/O and no clock of their own: the dispatch loop
//! ([`crate::dispatch`]) feeds them instants and applies what they decide.

pub(crate) mod backoff;
pub(crate) mod breaker;
pub(crate) mod rate;
pub(crate) mod slots;
pub(crate) mod window;
