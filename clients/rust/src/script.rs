//! The script path: the module's commands as `clients/lua/slidingwindow.lua` run with `EVALSHA`
//! (the file the Python, Node and Go helpers run), for servers that cannot load the module; and
//! how a client chooses between the two ([`Backend`]).

use crate::error::Error;
use redis::{Arg, Cmd, Value};
use std::fmt;
use std::str::FromStr;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicU8, Ordering};

/// The contract as a Lua script (contract, "Without the module: the script path"):
/// `slidingwindow.lua` in the crate, a link to the one file (`clients/go/slidingwindow.lua`) that
/// `cargo package` packs as a file.
pub const SCRIPT: &str = include_str!("../slidingwindow.lua");

/// The script's SHA1, as `EVALSHA` names it.
pub(crate) static SHA: LazyLock<String> =
    LazyLock::new(|| redis::Script::new(SCRIPT).get_hash().to_owned());

/// How a client reaches the contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Backend {
    /// The module where the server has it (`COMMAND INFO slidingwindow.allow`, asked on the first
    /// call and again after a reconnect or a failover), else the script.
    #[default]
    Auto,
    /// The module's commands only: a server without them is a configuration error.
    Module,
    /// The script only, on any server.
    Script,
}

impl Backend {
    pub fn as_str(&self) -> &'static str {
        match self {
            Backend::Auto => "auto",
            Backend::Module => "module",
            Backend::Script => "script",
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Backend {
    type Err = Error;

    fn from_str(s: &str) -> Result<Backend, Error> {
        match s {
            "auto" => Ok(Backend::Auto),
            "module" => Ok(Backend::Module),
            "script" => Ok(Backend::Script),
            other => Err(Error::Invalid(format!(
                "backend must be auto, module or script, not {other:?}"
            ))),
        }
    }
}

const UNKNOWN: u8 = 0;
const MODULE: u8 = 1;
const SCRIPT_PATH: u8 = 2;

/// The path calls take, shared by a client's clones: the forced one, or what `Auto` last found
/// (nothing yet, after a reconnect or a failover).
#[derive(Debug)]
pub(crate) struct Path {
    pub(crate) chosen: Backend,
    found: AtomicU8,
}

impl Path {
    pub(crate) fn new(chosen: Backend) -> Path {
        let found = match chosen {
            Backend::Auto => UNKNOWN,
            Backend::Module => MODULE,
            Backend::Script => SCRIPT_PATH,
        };
        Path {
            chosen,
            found: AtomicU8::new(found),
        }
    }

    /// Module or Script once known; Auto while it has to be asked.
    pub(crate) fn current(&self) -> Backend {
        match self.found.load(Ordering::Relaxed) {
            MODULE => Backend::Module,
            SCRIPT_PATH => Backend::Script,
            _ => Backend::Auto,
        }
    }

    pub(crate) fn set(&self, module: bool) {
        if self.chosen == Backend::Auto {
            let v = if module { MODULE } else { SCRIPT_PATH };
            self.found.store(v, Ordering::Relaxed);
        }
    }

    /// A new link may lead to another server: `Auto` asks again.
    pub(crate) fn forget(&self) {
        if self.chosen == Backend::Auto {
            self.found.store(UNKNOWN, Ordering::Relaxed);
        }
    }
}

/// What `COMMAND INFO slidingwindow.allow` answered (one entry per node asked, nil where the
/// command is unknown): whether every node has the module.
pub(crate) fn has_module(info: &Value) -> Result<bool, Error> {
    Ok(known(info, 1)?[0])
}

/// What `COMMAND INFO` of `names` commands answered, from one node or several (their entries one
/// after the other): for each name, whether every node knows it.
pub(crate) fn known(info: &Value, names: usize) -> Result<Vec<bool>, Error> {
    match info {
        Value::Array(entries) if !entries.is_empty() && entries.len() % names == 0 => {
            let mut out = vec![true; names];
            for (i, e) in entries.iter().enumerate() {
                out[i % names] &= !matches!(e, Value::Nil);
            }
            Ok(out)
        }
        Value::Array(entries) if entries.is_empty() => Ok(vec![false; names]),
        other => Err(Error::Reply(format!("COMMAND INFO answered {other:?}"))),
    }
}

/// The module command `cmd` is: its name after `SLIDINGWINDOW.`, in upper case; None for any other
/// command.
pub(crate) fn module_command(cmd: &Cmd) -> Option<String> {
    match cmd.args_iter().next() {
        Some(Arg::Simple(name)) if name.len() > 14 => {
            let (prefix, rest) = name.split_at(14);
            prefix
                .eq_ignore_ascii_case(b"SLIDINGWINDOW.")
                .then(|| String::from_utf8_lossy(rest).to_ascii_uppercase())
        }
        _ => None,
    }
}

/// The module command `cmd` as the script's `EVALSHA sha numkeys key... command random args...`;
/// an error for the commands only the module has.
pub(crate) fn translate(cmd: &Cmd, name: &str) -> Result<Cmd, Error> {
    let args: Vec<&[u8]> = cmd
        .args_iter()
        .skip(1)
        .map(|a| match a {
            Arg::Simple(b) => b,
            _ => b"0",
        })
        .collect();
    let (keys, rest): (&[&[u8]], Vec<&[u8]>) = match name {
        "ALLOW" | "PEEK" | "REFUND" => match args.split_first() {
            Some((key, rest)) => (std::slice::from_ref(key), rest.to_vec()),
            None => (&[], Vec::new()),
        },
        // The keys go as KEYS; a call without numkeys keys and a now gets none, and the script
        // answers the module's error.
        "ALLOWALL" | "PEEKALL" => match args.first().and_then(|n| numkeys(n)) {
            Some(n) if args.len() >= n + 2 => {
                let mut rest = vec![args[0]];
                rest.extend_from_slice(&args[n + 1..]);
                (&args[1..=n], rest)
            }
            _ => (&[], args.clone()),
        },
        other => {
            return Err(Error::Invalid(format!(
                "SLIDINGWINDOW.{other} needs the module: the script path (a server without it) \
                 has only ALLOW, PEEK, ALLOWALL, PEEKALL and REFUND"
            )));
        }
    };
    let mut out = redis::cmd("EVALSHA");
    out.arg(SHA.as_str()).arg(keys.len());
    for k in keys {
        out.arg(*k);
    }
    out.arg(name.to_ascii_lowercase()).arg(&entropy()?[..]);
    for a in rest {
        out.arg(a);
    }
    Ok(out)
}

/// `numkeys` as the server reads it (plain decimal digits), when it is from 1 to 16.
fn numkeys(word: &[u8]) -> Option<usize> {
    let text = std::str::from_utf8(word).ok()?;
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) || text.len() > 19 {
        return None;
    }
    text.parse::<usize>().ok().filter(|n| (1..=16).contains(n))
}

/// The ULID alphabet.
const CROCKFORD: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/// The script's random word: 16 random Crockford characters, the random part of the first member a
/// call adds (scripts have no good randomness of their own).
fn entropy() -> Result<[u8; 16], Error> {
    let mut b = [0u8; 16];
    getrandom::getrandom(&mut b)
        .map_err(|e| Error::Invalid(format!("no random bytes for the script: {e}")))?;
    Ok(b.map(|v| CROCKFORD[usize::from(v & 31)]))
}

/// An error line that says the server cannot run what this path sends: the command is unknown
/// (no module, a renamed `EVALSHA`) or refused to this user.
pub(crate) fn unusable(line: &str) -> bool {
    let lower = line.to_ascii_lowercase();
    lower.starts_with("err unknown command") || lower.starts_with("noperm")
}

pub(crate) fn noscript(line: &str) -> bool {
    line.starts_with("NOSCRIPT")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(cmd: &Cmd) -> Vec<String> {
        cmd.args_iter()
            .map(|a| match a {
                Arg::Simple(b) => String::from_utf8_lossy(b).to_string(),
                _ => "?".into(),
            })
            .collect()
    }

    fn words(cmd: &Cmd) -> String {
        let mut t = text(cmd);
        // The random word.
        let random = 4 + t[2].parse::<usize>().unwrap();
        t[random] = "R".into();
        t[1] = "SHA".into();
        t.join(" ")
    }

    #[test]
    fn commands_become_the_scripts_keys_and_arguments() {
        let mut allow = redis::cmd("SLIDINGWINDOW.ALLOW");
        allow.arg("k").arg(1).arg(10).arg("*").arg("DETAIL");
        let name = module_command(&allow).unwrap();
        assert_eq!(name, "ALLOW");
        let t = translate(&allow, &name).unwrap();
        assert_eq!(words(&t), "EVALSHA SHA 1 k allow R 1 10 * DETAIL");
        let random = &text(&t)[5];
        assert_eq!(random.len(), 16);
        assert!(random.bytes().all(|b| CROCKFORD.contains(&b)), "{random}");
        assert_eq!(text(&t)[1], *SHA);
        let mut all = redis::cmd("slidingwindow.allowall");
        all.arg(2).arg("a").arg("b").arg(5).arg("LIMIT").arg(1);
        let name = module_command(&all).unwrap();
        assert_eq!(
            words(&translate(&all, &name).unwrap()),
            "EVALSHA SHA 2 a b allowall R 2 5 LIMIT 1"
        );
        // Not enough words for numkeys keys and a now: no keys, the script answers the error.
        let mut short = redis::cmd("SLIDINGWINDOW.PEEKALL");
        short.arg(2).arg("a").arg("b");
        assert_eq!(
            words(&translate(&short, "PEEKALL").unwrap()),
            "EVALSHA SHA 0 peekall R 2 a b"
        );
        let mut refund = redis::cmd("SLIDINGWINDOW.REFUND");
        refund.arg("k").arg(1).arg("AT").arg(5);
        assert_eq!(
            words(&translate(&refund, "REFUND").unwrap()),
            "EVALSHA SHA 1 k refund R 1 AT 5"
        );
        let top = redis::cmd("SLIDINGWINDOW.TOP");
        assert!(matches!(translate(&top, "TOP"), Err(Error::Invalid(w)) if w.contains("module")));
        assert_eq!(module_command(&redis::cmd("PING")), None);
        assert_eq!(module_command(&redis::cmd("SLIDINGWINDOW.")), None);
    }

    #[test]
    fn numkeys_as_the_server_reads_it() {
        assert_eq!(numkeys(b"016"), Some(16));
        for bad in [
            &b"0"[..],
            b"17",
            b"",
            b"+1",
            b"1.0",
            b"99999999999999999999999",
        ] {
            assert_eq!(numkeys(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn backends_by_name() {
        for b in [Backend::Auto, Backend::Module, Backend::Script] {
            assert_eq!(b.as_str().parse::<Backend>().unwrap(), b);
        }
        assert!("lua".parse::<Backend>().is_err());
        let p = Path::new(Backend::Auto);
        assert_eq!(p.current(), Backend::Auto);
        p.set(false);
        assert_eq!(p.current(), Backend::Script);
        p.forget();
        assert_eq!(p.current(), Backend::Auto);
        let forced = Path::new(Backend::Module);
        forced.set(false);
        forced.forget();
        assert_eq!(forced.current(), Backend::Module);
    }

    #[test]
    fn the_answer_to_command_info() {
        let entry = Value::Array(vec![Value::Int(1)]);
        assert!(has_module(&Value::Array(vec![entry.clone()])).unwrap());
        assert!(!has_module(&Value::Array(vec![entry.clone(), Value::Nil])).unwrap());
        assert!(!has_module(&Value::Array(vec![])).unwrap());
        assert!(has_module(&Value::Nil).is_err());
        let two_nodes = Value::Array(vec![entry.clone(), Value::Nil, entry.clone(), entry]);
        assert_eq!(known(&two_nodes, 2).unwrap(), [true, false]);
        assert!(known(&Value::Array(vec![Value::Nil]), 2).is_err());
    }
}
