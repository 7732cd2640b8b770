//! Fresh member names: ULIDs (26 characters, Crockford base32), time part from the request's `now`.

use rand::rngs::{SmallRng, SysRng};
use rand::{RngExt, SeedableRng, TryRng};
use std::cell::RefCell;
use ulid::{ULID_LEN, Ulid};

/// Bytes in one member name.
pub const MEMBER_LEN: usize = ULID_LEN;

thread_local! {
    // Commands run on Redis's main thread; 80 random bits make collisions practically impossible,
    // and the caller still checks each add with NX.
    static RNG: RefCell<SmallRng> = RefCell::new(seeded());
}

fn seeded() -> SmallRng {
    let mut seed = [0u8; 32];
    if SysRng.try_fill_bytes(&mut seed).is_err() {
        // No OS entropy: fall back to the clock, still unique enough with the NX check behind it.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        seed[..16].copy_from_slice(&t.to_le_bytes());
        seed[16..24].copy_from_slice(&u64::from(std::process::id()).to_le_bytes());
    }
    SmallRng::from_seed(seed)
}

/// Writes a fresh ULID for a request at `now_ms` into `buf`.
pub fn fresh(now_ms: u64, buf: &mut [u8; MEMBER_LEN]) {
    let random: u128 = RNG.with(|r| r.borrow_mut().random());
    Ulid::from_parts(now_ms, random).array_to_str(buf);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn members_are_ulids_and_unique() {
        let mut seen = HashSet::new();
        for now in [0, 1, 1_764_000_000_000, 1 << 48, 1 << 53] {
            for _ in 0..1000 {
                let mut buf = [0u8; MEMBER_LEN];
                fresh(now, &mut buf);
                let text = std::str::from_utf8(&buf).unwrap_or_default();
                assert!(
                    text.bytes()
                        .all(|b| b"0123456789ABCDEFGHJKMNPQRSTVWXYZ".contains(&b)),
                    "{text}"
                );
                let id = Ulid::from_string(text).map_err(|e| format!("{e:?}"));
                assert_eq!(id.map(|u| u.timestamp_ms()), Ok(now & ((1 << 48) - 1)));
                assert!(seen.insert(buf));
            }
        }
    }
}
