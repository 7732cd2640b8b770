//! The client-made members the Lua script needs, from the tests' seeded generator (SplitMix64),
//! so every run and every variant sees the same request stream.

use testkit::rng::Rng;

/// SplitMix64's finaliser: a bijection on u64, so distinct inputs give distinct outputs.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

const CROCKFORD: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/// ULID-shaped members (26 Crockford base32 characters: 48-bit time, 80 bits of "randomness"),
/// like the ones a client of the seed would send. The 80 bits hold a mixed counter, so members
/// never repeat within a run.
pub struct Members {
    counter: u64,
    rng: Rng,
}

impl Members {
    pub fn new(seed: u64) -> Members {
        Members {
            counter: 0,
            rng: Rng::new(seed),
        }
    }

    pub fn next(&mut self, now_ms: u64) -> String {
        self.counter += 1;
        let random = (u128::from(mix(self.counter)) << 16) | u128::from(self.rng.next() >> 48);
        let value = (u128::from(now_ms & 0xFFFF_FFFF_FFFF) << 80) | random;
        encode_base32(value)
    }
}

/// 128 bits as 26 base32 digits, most significant first (the first digit carries 3 bits).
fn encode_base32(mut value: u128) -> String {
    let mut out = [0u8; 26];
    for slot in out.iter_mut().rev() {
        *slot = CROCKFORD[(value & 31) as usize];
        value >>= 5;
    }
    out.iter().map(|&b| b as char).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_are_26_chars_and_distinct() {
        let mut members = Members::new(1);
        let a = members.next(1_700_000_000_000);
        let b = members.next(1_700_000_000_000);
        assert_eq!(a.len(), 26);
        assert_ne!(a, b);
        assert!(a.bytes().all(|c| CROCKFORD.contains(&c)));
    }
}
