//! Text a tenant, producer or receiver controls, made safe to show: every control character
//! escaped (`\n`, `\r`, `\t`, `\x1b`, `\u{9b}`…) and the bidirectional overrides of Unicode
//! (which reorder what a terminal or a page shows) too, so an error text cannot forge a line
//! of a table or a log, nor send a terminal escape sequence. The command line's tables and
//! the console's pages both show such text through [`esc`]. Below every layer: it uses no
//! other module of the crate.

use std::fmt::Write as _;

/// `text` with every control character and bidirectional override escaped; any other
/// character as is.
pub fn esc(text: &str) -> String {
    if !text.chars().any(needs_escape) {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x100 && needs_escape(c) => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if needs_escape(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

/// Whether [`esc`] escapes `c`: a control character or a bidirectional override.
pub fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_and_bidi_overrides_are_escaped_and_the_rest_kept() {
        assert_eq!(esc("http 500: boom"), "http 500: boom");
        assert_eq!(esc("a\nb\rc\td"), "a\\nb\\rc\\td");
        assert_eq!(esc("\u{1b}[31mred\u{1b}[0m"), "\\x1b[31mred\\x1b[0m");
        assert_eq!(esc("\u{7f}\u{9b}"), "\\x7f\\x9b");
        assert_eq!(esc("ab\u{202e}cd"), "ab\\u{202e}cd");
        assert_eq!(esc("héllo ✓"), "héllo ✓");
        assert!(needs_escape('\u{1b}') && needs_escape('\u{2066}') && !needs_escape('é'));
    }
}
