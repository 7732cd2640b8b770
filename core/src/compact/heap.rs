//! The heap a compact log owns, as the server's allocator and defragmenter see it: the
//! allocator's size classes (what a buffer of some bytes really takes) and the `Mover` that may
//! relocate each allocation (the server's active defragmentation).

/// The allocator's size class for `bytes`: four classes per doubling (16-byte steps up to 128).
pub fn size_class(bytes: usize) -> usize {
    match bytes {
        0 => 0,
        1..=16 => bytes.next_multiple_of(8),
        17..=128 => bytes.next_multiple_of(16),
        _ => {
            let step = 1usize << (usize::BITS - (bytes - 1).leading_zeros()).saturating_sub(3);
            bytes.next_multiple_of(step)
        }
    }
}

/// Something that can move heap allocations elsewhere (the server's defragmenter): given each
/// one, it may replace it by an identical copy.
pub trait Mover {
    fn bytes(&mut self, buf: &mut Box<[u8]>);
    fn vec<T>(&mut self, v: &mut Vec<T>);
    fn boxed<T>(&mut self, b: &mut Box<T>);
    /// Whether to stop here and resume later (the defragmenter's time is up).
    fn should_stop(&mut self) -> bool;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_fill_size_classes() {
        // (bytes asked, the class)
        for (bytes, class) in [
            (0, 0),
            (1, 8),
            (12, 16),
            (20, 32),
            (129, 160),
            (256, 256),
            (257, 320),
            (4097, 5120),
            (240_000, 262_144),
        ] {
            assert_eq!(size_class(bytes), class, "{bytes}");
        }
    }
}
