//! What a person reads: times as RFC 3339 with how long ago (or until), durations in words,
//! counts with their noun's plural, tables laid out by `comfy-table`, and every text a
//! tenant, producer or receiver controls with its control characters escaped, so an error
//! text cannot forge a line of the table or the log, nor send a terminal escape sequence.
//! `--json` output never goes through here: it keeps the raw values and milliseconds.

use std::time::{Duration, UNIX_EPOCH};

pub use ankusa::text::esc;

/// [`esc`], then cut to at most `max` characters (an ellipsis marks the cut).
pub fn esc_cut(text: &str, max: usize) -> String {
    let e = esc(text);
    if e.chars().count() <= max {
        return e;
    }
    let mut cut: String = e.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// [`esc`], then cut to at most `max` characters by taking out the middle (an ellipsis marks
/// the cut): for an error with its cause chain, whose head names what was tried and whose
/// tail names the root cause (`connect: error sending request …: Connection refused (os
/// error 111)`), both ends matter more than the middle.
pub fn esc_cut_middle(text: &str, max: usize) -> String {
    let e = esc(text);
    let n = e.chars().count();
    if n <= max {
        return e;
    }
    let keep = max.saturating_sub(1);
    let head = keep / 2;
    let tail = keep - head;
    let mut cut: String = e.chars().take(head).collect();
    cut.push('…');
    cut.extend(e.chars().skip(n - tail));
    cut
}

/// `n` and its noun, singular for exactly 1: `1 row`, `0 rows`, `2 dead letters`.
pub fn count(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// A time (ms since the epoch, Redis clock) as RFC 3339 in UTC to the second, and how far it
/// is from `now_ms`: `2026-12-02T06:45:12Z (3m 20s ago)`, `… (in 4s)`.
pub fn when(ms: i64, now_ms: i64) -> String {
    format!("{} ({})", rfc3339(ms), relative(ms, now_ms))
}

/// A time (ms since the epoch) as RFC 3339 in UTC to the second.
/// Times past 9999-12-31 (which RFC 3339 cannot write) show as its last second.
pub fn rfc3339(ms: i64) -> String {
    let t = UNIX_EPOCH + Duration::from_millis(ms.clamp(0, 253_402_300_799_000) as u64);
    humantime::format_rfc3339_seconds(t).to_string()
}

/// How far `ms` is from `now_ms`, in words, to its two largest units: `3m 20s ago`,
/// `in 4s`, `in 29days 23h` (not `29days 23h 59m 59s`: beside an exact RFC 3339 time the
/// rest is noise), `now`.
pub fn relative(ms: i64, now_ms: i64) -> String {
    let d = ms - now_ms;
    if d.abs() < 1_000 {
        return "now".into();
    }
    let exact = span(d.unsigned_abs());
    let words = exact.split(' ').take(2).collect::<Vec<_>>().join(" ");
    if d < 0 {
        format!("{words} ago")
    } else {
        format!("in {words}")
    }
}

/// A byte count for people: `0 B`, `512 B`, `1.5 KiB`, `24.0 MiB`, `1.2 GiB`.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

/// A duration in ms, in words, to the second above a second (`2h 5m 3s`, `850ms`).
pub fn span(ms: u64) -> String {
    let d = if ms >= 1_000 {
        Duration::from_secs(ms / 1_000)
    } else {
        Duration::from_millis(ms)
    };
    humantime::format_duration(d).to_string()
}

/// A table without borders: a header row, then one line per row, columns padded. Every
/// cell is escaped ([`esc`]); cells stay on one line.
pub fn table<S: AsRef<str>>(header: &[&str], rows: impl IntoIterator<Item = Vec<S>>) -> String {
    use comfy_table::{presets::NOTHING, CellAlignment, ContentArrangement, Table};
    let mut t = Table::new();
    t.load_preset(NOTHING)
        .set_content_arrangement(ContentArrangement::Disabled)
        .set_header(header.iter().map(|h| h.to_string()));
    for row in rows {
        t.add_row(row.iter().map(|c| esc(c.as_ref())));
    }
    for col in t.column_iter_mut() {
        col.set_cell_alignment(CellAlignment::Left);
        col.set_padding((0, 2));
    }
    // comfy-table pads the last column too; a line ends at its last character.
    t.lines()
        .map(|l| l.trim_end().to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_counts_read_in_binary_units() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(1023), "1023 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(24 << 20), "24.0 MiB");
        assert_eq!(bytes(u64::MAX), "16.0 EiB");
    }

    #[test]
    fn cut_cells_are_escaped_first_and_keep_the_ends_that_matter() {
        assert_eq!(esc_cut("abcdef", 4), "abc…");
        assert_eq!(esc_cut("a\nb", 10), "a\\nb");
        assert_eq!(esc_cut_middle("abcdef", 10), "abcdef");
        assert_eq!(esc_cut_middle("abcdefghij", 7), "abc…hij");
        let chain = "connect: error sending request (http://127.0.0.1:1/…): client error \
                     (Connect): tcp connect error: Connection refused (os error 111)";
        let cell = esc_cut_middle(chain, 80);
        assert_eq!(cell.chars().count(), 80);
        assert!(cell.starts_with("connect: error sending"), "{cell}");
        assert!(
            cell.ends_with("Connection refused (os error 111)"),
            "{cell}"
        );
    }

    #[test]
    fn counts_take_the_plural_except_for_one() {
        assert_eq!(count(1, "row", "rows"), "1 row");
        assert_eq!(count(0, "row", "rows"), "0 rows");
        assert_eq!(count(2, "dead letter", "dead letters"), "2 dead letters");
    }

    #[test]
    fn times_are_rfc3339_with_how_long_ago_or_until() {
        let t = 1_796_191_147_252;
        assert_eq!(rfc3339(t), "2026-12-02T05:59:07Z");
        assert_eq!(when(t, t + 200_000), "2026-12-02T05:59:07Z (3m 20s ago)");
        assert_eq!(relative(t + 4_000, t), "in 4s");
        assert_eq!(relative(t, t + 300), "now");
        let month = 30 * 86_400_000 - 1_000;
        assert_eq!(relative(t + month, t), "in 29days 23h");
        assert_eq!(relative(t, t + 7_503_000), "2h 5m ago");
        assert_eq!(span(850), "850ms");
        assert_eq!(span(7_503_000), "2h 5m 3s");
    }

    #[test]
    fn a_table_escapes_its_cells_and_pads_its_columns() {
        let t = table(
            &["ID", "ERROR"],
            vec![vec!["1", "ok"], vec!["22", "bad\nline\u{1b}[31m"]],
        );
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3, "{t}");
        assert!(lines[0].starts_with("ID  "), "{t}");
        assert!(lines[2].contains("bad\\nline\\x1b[31m"), "{t}");
        assert!(!t.contains('\u{1b}'));
        let col = lines[0].find("ERROR").unwrap();
        assert_eq!(lines[2].find("bad"), Some(col), "{t}");
    }
}
