//! Text from a plugin made fit for the host's logs and messages.

/// `text` cut to `max` bytes, with control characters escaped: a plugin's line stays
/// one line (no forged lines after a newline, no terminal escapes).
pub fn one_line(text: &str, max: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max) + 3);
    for c in text.chars() {
        if out.len() >= max {
            out.push('…');
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}
