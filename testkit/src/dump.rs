//! The DUMP payload's format, as the tests and the bench read and write compact logs' payloads:
//! RDB lengths, LEB128 varints, the CRC-64 trailer, LZF, and a compact log's timestamps.

/// CRC-64/Jones (reflected), as Redis checks DUMP payloads, a byte a step.
pub fn crc64(bytes: &[u8]) -> u64 {
    let mut table = [0u64; 256];
    for (i, entry) in table.iter_mut().enumerate() {
        let mut crc = i as u64;
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0x95AC_9329_AC4B_C9B5
            } else {
                crc >> 1
            };
        }
        *entry = crc;
    }
    bytes.iter().fold(0u64, |crc, &b| {
        table[((crc ^ u64::from(b)) & 0xff) as usize] ^ (crc >> 8)
    })
}

/// A DUMP payload of `body` (type, module id, value) and `rdb_version`, under its checksum.
pub fn payload(body: &[u8], rdb_version: &[u8]) -> Vec<u8> {
    let mut p = body.to_vec();
    p.extend_from_slice(rdb_version);
    let crc = crc64(&p);
    p.extend_from_slice(&crc.to_le_bytes());
    p
}

/// Writes an RDB length: 6 or 14 bits, or 0x80 and 32, or 0x81 and 64, big-endian (as
/// `RedisModule_SaveUnsigned` and strings write it).
pub fn write_len(out: &mut Vec<u8>, v: u64) {
    match v {
        0..64 => out.push(v as u8),
        64..16384 => out.extend_from_slice(&(0x4000 | v as u16).to_be_bytes()),
        16384..0x1_0000_0000 => {
            out.push(0x80);
            out.extend_from_slice(&(v as u32).to_be_bytes());
        }
        _ => {
            out.push(0x81);
            out.extend_from_slice(&v.to_be_bytes());
        }
    }
}

/// Writes `v` in LEB128, as the compact log's encoding writes its numbers.
pub fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// An RDB length: 6, 14, 32 or 64 bits by its first two bits (or 0x80 / 0x81).
pub fn read_len(bytes: &[u8], at: &mut usize) -> Option<u64> {
    let first = *bytes.get(*at)?;
    *at += 1;
    let mut be = |n: usize| -> Option<u64> {
        let v = bytes
            .get(*at..*at + n)?
            .iter()
            .fold(0u64, |v, b| v << 8 | u64::from(*b));
        *at += n;
        Some(v)
    };
    match first >> 6 {
        0 => Some(u64::from(first & 0x3f)),
        1 => Some(u64::from(first & 0x3f) << 8 | be(1)?),
        _ if first == 0x80 => be(4),
        _ if first == 0x81 => be(8),
        _ => None,
    }
}

/// LZF decompression, as Redis compresses long RDB strings.
fn lzf(input: &[u8], len: usize) -> Option<Vec<u8>> {
    let mut out: Vec<u8> = Vec::with_capacity(len);
    let mut ip = 0;
    while ip < input.len() {
        let ctrl = usize::from(input[ip]);
        ip += 1;
        if ctrl < 32 {
            out.extend_from_slice(input.get(ip..ip + ctrl + 1)?);
            ip += ctrl + 1;
        } else {
            let mut n = ctrl >> 5;
            if n == 7 {
                n += usize::from(*input.get(ip)?);
                ip += 1;
            }
            let back = ((ctrl & 0x1f) << 8) + usize::from(*input.get(ip)?) + 1;
            ip += 1;
            let from = out.len().checked_sub(back)?;
            for i in 0..n + 2 {
                out.push(out[from + i]);
            }
        }
    }
    (out.len() == len).then_some(out)
}

/// The timestamps of a compact log's DUMP payload: type 7, the module id (its low 10 bits the
/// encoding), the count (opcode 2), the buffer of varints (opcode 5), EOF (opcode 0). Encoding 1:
/// `count` timestamps, each a distance from the one before; encoding 2: `count` distinct ones,
/// a copied one followed by 0 and its extra copies.
pub fn compact_timestamps(dump: &[u8]) -> Option<Vec<u64>> {
    let mut at = 1;
    let encoding = read_len(dump, &mut at)? & 0x3ff;
    let (2, count) = (read_len(dump, &mut at)?, read_len(dump, &mut at)?) else {
        return None;
    };
    if read_len(dump, &mut at)? != 5 {
        return None;
    }
    // A long buffer may be saved LZF-compressed: 0xC3, compressed length, length, data.
    let buf = if dump.get(at) == Some(&0xC3) {
        at += 1;
        let clen = usize::try_from(read_len(dump, &mut at)?).ok()?;
        let len = usize::try_from(read_len(dump, &mut at)?).ok()?;
        lzf(dump.get(at..at + clen)?, len)?
    } else {
        let len = usize::try_from(read_len(dump, &mut at)?).ok()?;
        dump.get(at..at + len)?.to_vec()
    };
    let mut varints = Vec::new();
    let (mut v, mut shift) = (0u64, 0);
    for &b in &buf {
        v |= u64::from(b & 0x7f) << shift;
        shift += 7;
        if b & 0x80 == 0 {
            varints.push(v);
            (v, shift) = (0, 0);
        }
    }
    let (mut out, mut ts, mut distinct) = (Vec::new(), 0u64, 0u64);
    let mut it = varints.into_iter();
    while let Some(v) = it.next() {
        if encoding == 2 && !out.is_empty() && v == 0 {
            out.extend(std::iter::repeat_n(ts, usize::try_from(it.next()?).ok()?));
            continue;
        }
        ts += v;
        out.push(ts);
        distinct += 1;
    }
    let found = if encoding == 2 {
        distinct
    } else {
        out.len() as u64
    };
    (found == count).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_and_varints_read_back() {
        for v in [0, 63, 64, 16383, 16384, u64::from(u32::MAX), 1 << 40] {
            let mut out = Vec::new();
            write_len(&mut out, v);
            let mut at = 0;
            assert_eq!(read_len(&out, &mut at), Some(v));
            assert_eq!(at, out.len());
        }
        let mut out = Vec::new();
        varint(&mut out, 300);
        assert_eq!(out, [0xac, 0x02]);
    }

    #[test]
    fn the_checksum_is_redis_s() {
        // CRC-64/Jones of "123456789", Redis's own test vector (src/crc64.c).
        assert_eq!(crc64(b"123456789"), 0xe9c6_d914_c4b8_d9ca);
    }
}
