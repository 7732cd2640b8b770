//! The helpers' Lua fallback (clients/lua/slidingwindow.lua), called as the helpers call it, and
//! the module's side of a comparison.

use redis::Value;
use testkit::harness;

use harness::error_line;

const CLIENT_LUA: &str = include_str!("../../clients/lua/slidingwindow.lua");

/// The helpers' script, loaded once, called as the helpers call it.
pub struct Fallback {
    pub sha: String,
    /// The module's configs as the script takes them after the command word in ARGV[1]
    /// (`"lateness 3000"`), or nothing for the defaults.
    pub configs: String,
}

impl Fallback {
    pub fn load(c: &mut redis::Connection) -> Fallback {
        let sha = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(CLIENT_LUA)
            .query(c)
            .unwrap();
        Fallback {
            sha,
            configs: String::new(),
        }
    }

    /// The same script, given `configs` on every call.
    pub fn with(self, configs: &str) -> Fallback {
        Fallback {
            configs: configs.to_string(),
            ..self
        }
    }

    /// `command` with `keys` as KEYS and `rest` (the arguments after the keys) after the entropy.
    pub fn run(
        &self,
        c: &mut redis::Connection,
        command: &str,
        keys: &[String],
        rest: &[String],
    ) -> Value {
        let mut args = vec![
            "EVALSHA".to_string(),
            self.sha.clone(),
            keys.len().to_string(),
        ];
        args.extend(keys.iter().cloned());
        let word = format!("{} {}", command.to_lowercase(), self.configs);
        args.push(word.trim_end().to_string());
        args.push("0123456789ABCDEF".to_string());
        args.extend(rest.iter().cloned());
        harness::call_words(c, &args)
    }

    /// What the script answers to the module's argv `SLIDINGWINDOW.<command> words...`, split
    /// into KEYS as the helpers do (no keys when numkeys, the keys and now are not all there).
    pub fn like(&self, c: &mut redis::Connection, command: &str, words: &[String]) -> Value {
        if ["REFUND", "ALLOW", "PEEK"].contains(&command) {
            return match words.split_first() {
                Some((key, rest)) => self.run(c, command, std::slice::from_ref(key), rest),
                None => self.run(c, command, &[], &[]),
            };
        }
        let numkeys = words
            .first()
            .filter(|w| w.len() <= 2 && w.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|w| w.parse::<usize>().ok())
            .filter(|n| (1..=16).contains(n) && words.len() >= n + 2);
        match numkeys {
            Some(n) => {
                let mut rest = vec![words[0].clone()];
                rest.extend(words[n + 1..].iter().cloned());
                self.run(c, command, &words[1..=n], &rest)
            }
            None => self.run(c, command, &[], words),
        }
    }
}

/// A reply as text: the integers (arrays in brackets, nested for `DETAIL`), or the error line.
pub fn shown(v: &Value) -> String {
    match error_line(v) {
        Some(e) => e,
        None => match v {
            Value::Int(n) => n.to_string(),
            Value::Array(items) => {
                let inner: Vec<String> = items.iter().map(shown).collect();
                format!("[{}]", inner.join(", "))
            }
            other => panic!("not an integer reply: {other:?}"),
        },
    }
}

pub fn module(c: &mut redis::Connection, command: &str, words: &[String]) -> Value {
    let mut args = vec![format!("SLIDINGWINDOW.{command}")];
    args.extend(words.iter().cloned());
    harness::call_words(c, &args)
}
