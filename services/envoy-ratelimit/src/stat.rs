//! Where a limit's statistics are counted: its key (the domain and one part per descriptor
//! level), the reference's sanitizing of the key's parts, and the limit's counters.

use std::sync::atomic::AtomicU64;

/// Where a limit's statistics are counted: the domain and one part per descriptor level
/// (`key` or `key_value`), named as the reference names them.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StatKey {
    pub domain: String,
    pub parts: Vec<String>,
}

/// One limit's counters.
#[derive(Debug, Default)]
pub struct Counters {
    pub total_hits: AtomicU64,
    pub over_limit: AtomicU64,
    pub near_limit: AtomicU64,
    pub within_limit: AtomicU64,
    pub shadow_mode: AtomicU64,
}

/// The reference's statistics names: `:` and `|` become `_`, as do the dots of an IPv4 address.
pub fn sanitize(s: &str) -> String {
    let mut out: Vec<u8> = s
        .bytes()
        .map(|b| if b == b':' || b == b'|' { b'_' } else { b })
        .collect();
    let mut i = 0;
    while i < out.len() {
        match ipv4_at(&out, i) {
            Some(end) => {
                for b in &mut out[i..end] {
                    if *b == b'.' {
                        *b = b'_';
                    }
                }
                i = end;
            }
            None => i += 1,
        }
    }
    String::from_utf8(out).unwrap_or_default()
}

/// `\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}` starting at `i`: where it ends.
fn ipv4_at(s: &[u8], i: usize) -> Option<usize> {
    let mut at = i;
    for group in 0..4 {
        let run = s[at..].iter().take_while(|b| b.is_ascii_digit()).count();
        if run == 0 || (group < 3 && run > 3) {
            return None;
        }
        at += run.min(3);
        if group < 3 {
            if s.get(at) != Some(&b'.') {
                return None;
            }
            at += 1;
        }
    }
    Some(at)
}
