//! Replaying dead letters as new hooks, paced by the pipeline's pressure.

use super::*;

/// How [`replay`] paces itself and how much it does.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
#[serde(default, deny_unknown_fields)]
pub struct ReplayOptions {
    /// Pause while the lag of the oldest due row is above this, ms. Default 5000.
    pub max_lag_ms: u64,
    /// Dead letters put back per step (one script call). Default 100.
    pub batch: usize,
    /// Replay at most this many. Default: all that match.
    pub limit: Option<u64>,
    /// Give up ([`Error::Unavailable`]) after pausing this long in one stretch, ms.
    /// Default 60000.
    pub max_pause_ms: u64,
    /// Pace by [`pressure`]; `false` replays at once (the pipeline must absorb it).
    /// Default true.
    pub pace: bool,
    /// Replay nothing: count what the filter selects and return the first
    /// [`DRY_RUN_SHOWN`] of them in [`ReplayReport::selected`]. Default false.
    pub dry_run: bool,
}

/// Dead letters a dry run returns, at most: enough to check a filter by eye.
pub const DRY_RUN_SHOWN: usize = 10;

impl Default for ReplayOptions {
    fn default() -> Self {
        ReplayOptions {
            max_lag_ms: 5_000,
            batch: 100,
            limit: None,
            max_pause_ms: 60_000,
            pace: true,
            dry_run: false,
        }
    }
}

/// What [`replay`] reports while it runs (for a progress bar).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplayProgress {
    /// The dead letters selected (before any is replayed).
    Matched {
        /// How many will be tried.
        total: u64,
    },
    /// One more step done.
    Step {
        /// Tried so far (replayed or skipped).
        done: u64,
        /// Replayed so far.
        replayed: u64,
        /// Of this many.
        total: u64,
    },
    /// Waiting for room: the window is full, the lag is over `max_lag_ms`, or there is no
    /// live leader; `why` says which.
    Paused {
        /// In words.
        why: String,
    },
    /// Room again after a pause.
    Resumed,
}

/// What a [`replay`] did.
#[derive(
    Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema,
)]
pub struct ReplayReport {
    /// Dead letters the filter selected (at most `limit`).
    pub matched: u64,
    /// Put back as due rows.
    pub replayed: u64,
    /// Gone before their turn (replayed or purged by someone else).
    pub missing: u64,
    /// Not replayable: their hook is gone; they stay until purged.
    pub hook_gone: u64,
    /// Their row is due or claimed already; they stay.
    pub live: u64,
    /// Times the replay paused for pressure.
    pub pauses: u64,
    /// Time spent paused, ms.
    pub paused_ms: u64,
    /// True for a dry run: nothing was replayed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dry_run: bool,
    /// A dry run's first selected dead letters, oldest first per tenant (at most
    /// [`DRY_RUN_SHOWN`]); empty otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub selected: Vec<DeadLetter>,
}

/// Poll interval while paused.
pub(super) const PACE_POLL: Duration = Duration::from_millis(100);

/// Put the dead letters `filter` selects back as new due rows: attempts reset, retry
/// horizon restarted, each entry deleted in the same atomic step (`dlq_replay.lua`).
/// Before each step of `opts.batch` it waits for [`pressure`] to show room: the window
/// not full and the lag at most `opts.max_lag_ms` (and a live leader). Only entries
/// present when the replay starts are visited, so rows that fail again are not replayed
/// twice by one call. `progress` sees each step. With `opts.dry_run` nothing is replayed: the
/// report counts what the filter selects and carries the first few (`selected`).
/// Errors: a malformed filter; [`Error::Unavailable`] after pausing `max_pause_ms` in one
/// stretch or when Redis cannot answer (what was replayed stays replayed).
pub async fn replay(
    store: &Store,
    filter: &Filter,
    opts: &ReplayOptions,
    mut progress: impl FnMut(ReplayProgress),
) -> Result<ReplayReport, Error> {
    filter.check()?;
    let bounds = filter.bounds(store.now_ms().await?)?;
    let limit = opts.limit.unwrap_or(u64::MAX);
    let batch = opts.batch.clamp(1, 10_000);
    // Pass 1: count, for the progress bar, on a snapshot of each stream's end (and keep the
    // first few for a dry run).
    let mut walks = Vec::new();
    let mut total = 0u64;
    let mut selected = Vec::new();
    for t in filter_tenants(store, filter).await? {
        let walk = Walk::new(store, &t, bounds).await?;
        let mut count_walk = walk.clone();
        while total < limit {
            match count_walk.next(store, filter, PAGE).await? {
                Some(page) => {
                    total += page.len() as u64;
                    let room = DRY_RUN_SHOWN.saturating_sub(selected.len());
                    selected.extend(page.into_iter().take(room));
                }
                None => break,
            }
        }
        walks.push(walk);
    }
    let total = total.min(limit);
    if opts.dry_run {
        selected.truncate(total.min(DRY_RUN_SHOWN as u64) as usize);
        return Ok(ReplayReport {
            matched: total,
            dry_run: true,
            selected,
            ..Default::default()
        });
    }
    progress(ReplayProgress::Matched { total });
    let mut report = ReplayReport {
        matched: total,
        ..Default::default()
    };
    let mut done = 0u64;
    let mut ids: Vec<String> = Vec::with_capacity(batch);
    for mut walk in walks {
        while done < total {
            let Some(page) = walk.next(store, filter, batch as u64).await? else {
                break;
            };
            for chunk in page.chunks(batch) {
                ids.clear();
                ids.extend(
                    chunk
                        .iter()
                        .take((total - done) as usize)
                        .map(|d| d.id.clone()),
                );
                if ids.is_empty() {
                    break;
                }
                if opts.pace {
                    wait_for_room(store, opts, &mut report, &mut progress, done, total).await?;
                }
                let r = store
                    .dlq_replay(&walk.tenant, &ids)
                    .await
                    .map_err(|e| match e {
                        StoreError::Redis(e) => Error::Unavailable(format!(
                            "redis: {e}; {} of {total} replayed",
                            report.replayed
                        )),
                        other => Error::Store(other),
                    })?;
                let mut counts = DlqReplayed {
                    replayed: report.replayed,
                    missing: report.missing,
                    hook_gone: report.hook_gone,
                    live: report.live,
                };
                counts += r;
                report.replayed = counts.replayed;
                report.missing = counts.missing;
                report.hook_gone = counts.hook_gone;
                report.live = counts.live;
                done += ids.len() as u64;
                progress(ReplayProgress::Step {
                    done,
                    replayed: report.replayed,
                    total,
                });
            }
        }
    }
    Ok(report)
}

/// Wait until [`pressure`] shows room for the next step of a paced operation (a replay, a
/// resend of many hooks): counts the pause in `report`, tells `progress`; errors with
/// [`Error::Unavailable`] after `opts.max_pause_ms` in one stretch.
pub(crate) async fn wait_for_room(
    store: &Store,
    opts: &ReplayOptions,
    report: &mut ReplayReport,
    progress: &mut impl FnMut(ReplayProgress),
    done: u64,
    total: u64,
) -> Result<(), Error> {
    let started = tokio::time::Instant::now();
    let mut paused = false;
    loop {
        let why = match pressure(store).await {
            Ok(Pressure {
                window_full: false,
                lag_ms,
            }) if lag_ms <= opts.max_lag_ms => break,
            Ok(Pressure {
                window_full: true, ..
            }) => "the in-flight window is full".to_string(),
            Ok(Pressure { lag_ms, .. }) => {
                format!("lag {lag_ms} ms is over {} ms", opts.max_lag_ms)
            }
            Err(Error::Unavailable(why)) => why,
            Err(e) => return Err(e),
        };
        if !paused {
            paused = true;
            report.pauses += 1;
            progress(ReplayProgress::Paused { why: why.clone() });
        }
        if started.elapsed() >= Duration::from_millis(opts.max_pause_ms) {
            report.paused_ms += started.elapsed().as_millis() as u64;
            return Err(Error::Unavailable(format!(
                "paused for {} ms ({why}); {} of {total} done, {done} tried",
                opts.max_pause_ms, report.replayed
            )));
        }
        tokio::time::sleep(PACE_POLL).await;
    }
    if paused {
        report.paused_ms += started.elapsed().as_millis() as u64;
        progress(ReplayProgress::Resumed);
    }
    Ok(())
}
