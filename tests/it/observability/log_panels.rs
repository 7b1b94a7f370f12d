//! The delivery log's dashboard panels: every metric they use is exported by a worker that
//! archives into a real PostgreSQL, with the records it archived counted.

use super::*;
use crate::common::pg::TestDb;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_delivery_log_panels_metrics_are_exported_by_a_worker_with_a_log_store() {
    let db = TestDb::create().await;
    let url = db.url.clone();
    let r = running_worker_with(move |c| c.log.url = Some(url)).await;
    let used: Vec<String> = used_names()
        .into_keys()
        .filter(|n| n.starts_with("ankusa_log_"))
        .collect();
    assert!(
        used.len() >= 5,
        "the log panels use the log metrics: {used:?}"
    );
    // Each hook: one delivered and one dead-lettered attempt, and its end.
    let records = (3 * HOOKS) as f64;
    let s = r
        .scrape_until(|s| {
            let names = s.sample_names();
            used.iter().all(|n| names.contains(n))
                && s.value("ankusa_log_records_archived_total", &[]) == Some(records)
        })
        .await;
    assert_eq!(
        s.value("ankusa_log_stream_entries", &[("partition", "0")]),
        Some(0.0),
        "caught up"
    );
}
