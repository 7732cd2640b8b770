//! `setters!`: builder methods that each set one field and hand the builder back.

/// `setters!(Type { /// docs
/// name: Ty, ... })` writes, for each name, `pub fn name(mut self, v: Ty) -> Type`, which sets
/// the field of that name to `v`.
macro_rules! setters {
    ($ty:ident { $($(#[$attr:meta])* $name:ident: $t:ty),* $(,)? }) => {
        impl $ty {
            $(
                $(#[$attr])*
                pub fn $name(mut self, v: $t) -> $ty {
                    self.$name = v;
                    self
                }
            )*
        }
    };
}
