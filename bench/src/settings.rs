//! Server configs that some variant sets (e.g. the module's storage), switched so that each
//! variant's requests run with its values and every other variant's with the startup ones.
//! A storage config applies to the keys created while it is set, so it must hold whenever
//! that variant sends anything, interleaved or not.

use redis::Connection;

use crate::Result;
use crate::variants::Variant;

struct Entry {
    name: &'static str,
    startup: String,
    current: String,
}

pub struct Settings {
    entries: Vec<Entry>,
}

impl Settings {
    /// Reads the startup value of every config any of `variants` sets.
    pub fn read(con: &mut Connection, variants: &[&Variant]) -> Result<Settings> {
        let mut entries: Vec<Entry> = Vec::new();
        for (name, _) in variants.iter().flat_map(|v| v.config) {
            if entries.iter().any(|e| e.name == *name) {
                continue;
            }
            let pair: Vec<String> = redis::cmd("CONFIG").arg("GET").arg(name).query(con)?;
            let value = pair
                .get(1)
                .ok_or_else(|| format!("CONFIG GET {name}: no such config"))?;
            entries.push(Entry {
                name,
                startup: value.clone(),
                current: value.clone(),
            });
        }
        Ok(Settings { entries })
    }

    /// No configs: every lane runs with what its server has.
    pub fn none() -> Settings {
        Settings {
            entries: Vec::new(),
        }
    }

    /// Sets what `variant` runs with, sending only the configs that change.
    pub fn apply(&mut self, con: &mut Connection, variant: &Variant) -> Result<()> {
        // Another server, without the module's configs; the module's server keeps its own.
        if variant.shape.on_cell_server() {
            return Ok(());
        }
        for entry in &mut self.entries {
            let wanted = variant
                .config
                .iter()
                .find(|(name, _)| *name == entry.name)
                .map_or(entry.startup.as_str(), |(_, value)| *value);
            if entry.current != wanted {
                redis::cmd("CONFIG")
                    .arg("SET")
                    .arg(entry.name)
                    .arg(wanted)
                    .exec(con)?;
                entry.current = wanted.to_string();
            }
        }
        Ok(())
    }
}
