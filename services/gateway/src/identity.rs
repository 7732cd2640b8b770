//! Who a request is counted as: the identity header's value, else the client's address (IPv4,
//! or an IPv6 prefix); and names bounded in length whatever a client sends.

use sha2::{Digest, Sha256};
use std::borrow::Cow;
use std::net::{IpAddr, Ipv6Addr};

/// Longer names (identities, tenants) are keyed by their hash.
pub const MAX_NAME: usize = 128;
/// What a hashed name starts with. A name sent with it is hashed too, so that no name can be
/// spelled as another's hash.
const HASHED: &[u8] = b"sha256:";

/// `name` itself, or `sha256:<64 hex digits>` of it when it is longer than [`MAX_NAME`] bytes or
/// starts with `sha256:`.
pub fn bounded(name: &[u8]) -> Cow<'_, [u8]> {
    if name.len() <= MAX_NAME && !name.starts_with(HASHED) {
        return Cow::Borrowed(name);
    }
    let digest = Sha256::digest(name);
    let mut out = Vec::with_capacity(HASHED.len() + 64);
    out.extend_from_slice(HASHED);
    for b in digest.iter() {
        out.push(HEX[usize::from(b >> 4)]);
        out.push(HEX[usize::from(b & 0xf)]);
    }
    Cow::Owned(out)
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// A client address as an identity: IPv4 as itself (also when seen as `::ffff:a.b.c.d` on an IPv6
/// socket), IPv6 as its first `prefix` bits, `2001:db8:1:2::/64` (one host holds a whole /64).
pub fn address(ip: IpAddr, prefix: u8) -> String {
    match ip.to_canonical() {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) if prefix >= 128 => v6.to_string(),
        IpAddr::V6(v6) => {
            let bits = u128::from(v6);
            let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            format!("{}/{prefix}", Ipv6Addr::from(bits & mask))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_names_are_hashed() {
        assert_eq!(bounded(b"alice"), Cow::Borrowed(&b"alice"[..]));
        let edge = vec![b'a'; MAX_NAME];
        assert_eq!(&*bounded(&edge), &edge[..]);
        // `sha256sum` of 129 a's, and of "sha256:abc": a name sent with the prefix is hashed too.
        let text = |n: &[u8]| String::from_utf8(bounded(n).into_owned()).unwrap();
        assert_eq!(
            text(&[b'a'; MAX_NAME + 1]),
            "sha256:c12cb024a2e5551cca0e08fce8f1c5e314555cc3fef6329ee994a3db752166ae"
        );
        assert_eq!(
            text(b"sha256:abc"),
            "sha256:67e9bc3cfd2163c2978358dfe00d2f912cd4ee0c99f077c3583b39b48aebb124"
        );
        assert_eq!(bounded(&vec![b'x'; 500_000]).len(), 71, "whatever the size");
    }

    #[test]
    fn addresses() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(address(ip("10.1.2.3"), 64), "10.1.2.3");
        assert_eq!(address(ip("::ffff:127.0.0.1"), 64), "127.0.0.1");
        assert_eq!(address(ip("2001:db8:1:2:3:4:5:6"), 64), "2001:db8:1:2::/64");
        assert_eq!(address(ip("2001:db8:1:2:ffff::1"), 64), "2001:db8:1:2::/64");
        assert_eq!(address(ip("2001:db8:1:2:3:4:5:6"), 48), "2001:db8:1::/48");
        assert_eq!(address(ip("2001:db8::1"), 128), "2001:db8::1");
        assert_eq!(address(ip("2001:db8::1"), 0), "::/0");
        assert_eq!(address(ip("::1"), 64), "::/64");
    }
}
