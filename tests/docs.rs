//! `COMMAND DOCS` declares every argument, so `HELP` and the interactive hints of redis-cli /
//! valkey-cli show the syntax: checked on the reply itself, in `HELP`, and in a real cli driven
//! through a pseudo-terminal. `COMMAND DOCS`, `COMMAND INFO` and docs/commands.md are checked
//! against the command table (src/cmd/commands.json).

use testkit::harness;

use harness::{STARTUP_DEADLINE, Server, wait_until};
use redis::Value;
use serde_json::Value as Json;
use std::io::{Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// The syntax the clis print after the command name.
const SYNTAX: &str = "key window max now|* [COST cost] [LIMIT window max [LIMIT window max ...]] [LEASE ms] [PRECISION p] [DETAIL]";

/// The command table: src/cmd/commands.json's commands, their argument groups spliced in by
/// build.rs.
fn table() -> Vec<Json> {
    let text = include_str!(concat!(env!("OUT_DIR"), "/commands.json"));
    serde_json::from_str(text).expect("build.rs writes the commands as a JSON list")
}

fn field<'a>(v: &'a Json, name: &str) -> &'a str {
    v[name]
        .as_str()
        .unwrap_or_else(|| panic!("no string `{name}` in {v}"))
}

fn arguments(v: &Json) -> &[Json] {
    v["arguments"].as_array().map_or(&[], Vec::as_slice)
}

fn flag(v: &Json, name: &str) -> bool {
    v[name].as_bool().unwrap_or(false)
}

/// An argument list as the clis print it (`key [key ...]`, `[COST cost]`, `now|*`).
fn syntax(args: &[Json]) -> String {
    let words: Vec<String> = args.iter().map(syntax_of).collect();
    words.join(" ")
}

fn syntax_of(a: &Json) -> String {
    let token = a["token"].as_str();
    let mut one = match field(a, "type") {
        "pure-token" => token.unwrap_or_default().to_string(),
        "oneof" => {
            let choices: Vec<String> = arguments(a).iter().map(syntax_of).collect();
            choices.join("|")
        }
        "block" => syntax(arguments(a)),
        _ => field(a, "name").to_string(),
    };
    if let Some(t) = token
        && field(a, "type") != "pure-token"
    {
        one = format!("{t} {one}");
    }
    if flag(a, "multiple") {
        one = format!("{one} [{one} ...]");
    }
    if flag(a, "optional") {
        one = format!("[{one}]");
    }
    one
}

/// A reply as one line: arrays in brackets, status replies (the flags) with a leading `+`.
fn render(v: &Value) -> String {
    match v {
        Value::Array(items) => {
            let inner: Vec<String> = items.iter().map(render).collect();
            format!("[{}]", inner.join(" "))
        }
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => format!("+{s}"),
        Value::Int(n) => n.to_string(),
        other => format!("{other:?}"),
    }
}

/// The arguments as `render` prints them; Redis >= 7.2 (and Valkey) adds a `display_text` to
/// every argument that is neither a oneof nor a block.
struct Docs {
    display_text: bool,
}

impl Docs {
    fn of(s: &Server) -> Docs {
        Docs {
            display_text: s.version().redis_at_least(7, 2),
        }
    }

    /// A table's argument list as `COMMAND DOCS` answers it.
    fn table_args(&self, args: &[Json]) -> String {
        let args: Vec<String> = args.iter().map(|a| self.table_arg(a)).collect();
        format!("[{}]", args.join(" "))
    }

    fn table_arg(&self, a: &Json) -> String {
        let (name, ty) = (field(a, "name"), field(a, "type"));
        let mut out = format!("[name {name} type {ty}");
        if self.display_text && ty != "oneof" && ty != "block" {
            out += &format!(" display_text {name}");
        }
        if ty == "key" {
            out += " key_spec_index 0";
        }
        if let Some(t) = a["token"].as_str() {
            out += &format!(" token {t}");
        }
        let mut flags = Vec::new();
        if flag(a, "optional") {
            flags.push("+optional");
        }
        if flag(a, "multiple") {
            flags.push("+multiple");
            if a["token"].is_string() {
                flags.push("+multiple_token");
            }
        }
        if !flags.is_empty() {
            out += &format!(" flags [{}]", flags.join(" "));
        }
        if a["arguments"].is_array() {
            out += &format!(" arguments {}", self.table_args(arguments(a)));
        }
        out + "]"
    }

    /// One argument.
    fn arg(&self, name: &str, ty: &str, rest: &str) -> String {
        let display = if self.display_text {
            format!(" display_text {name}")
        } else {
            String::new()
        };
        format!("[name {name} type {ty}{display}{rest}]")
    }

    /// `first|*`, its token `AT` when it is `at`.
    fn one_of(&self, name: &str, first: &str) -> String {
        format!(
            "[name {name} type oneof{} arguments [{} {}]]",
            if name == "at" {
                " token AT flags [+optional]"
            } else {
                ""
            },
            self.arg(first, "integer", ""),
            self.arg("server-clock", "pure-token", " token *")
        )
    }

    /// `window max`.
    fn window_max(&self) -> String {
        format!(
            "{} {}",
            self.arg("window", "integer", ""),
            self.arg("max", "integer", "")
        )
    }

    /// `[COST cost]`.
    fn cost(&self) -> String {
        self.arg("cost", "integer", " token COST flags [+optional]")
    }

    /// `[LEASE ms] [PRECISION p] [DETAIL]`.
    fn options(&self) -> String {
        format!(
            "{} {} {}",
            self.arg("ms", "integer", " token LEASE flags [+optional]"),
            self.arg("p", "integer", " token PRECISION flags [+optional]"),
            self.arg("detail", "pure-token", " token DETAIL flags [+optional]"),
        )
    }

    /// The `arguments` of ALLOW and PEEK.
    fn allow(&self) -> String {
        format!(
            "[{} {} {} {} [name limit type block token LIMIT flags [+optional +multiple \
             +multiple_token] arguments [{}]] {}]",
            self.arg("key", "key", " key_spec_index 0"),
            self.window_max(),
            self.one_of("now", "now"),
            self.cost(),
            self.window_max(),
            self.options(),
        )
    }
}

#[test]
fn command_docs_declare_every_argument() {
    let s = Server::start();
    let args = Docs::of(&s).allow();
    let mut c = s.client();
    for (name, summary, complexity) in [
        (
            "slidingwindow.allow",
            "Trims the sliding-window log, counts it, and logs the request if it fits",
            "O(log N + M): N members in the window, M members trimmed",
        ),
        (
            "slidingwindow.peek",
            "Answers what SLIDINGWINDOW.ALLOW would, changing nothing",
            "O(log N): N members in the window",
        ),
    ] {
        let docs = harness::call(&mut c, &["COMMAND", "DOCS", name]);
        assert_eq!(
            render(&docs),
            format!(
                "[{name} [summary {summary} since 1.0.0 group module complexity {complexity} \
                 module slidingwindow arguments {args}]]"
            ),
            "COMMAND DOCS {name} on {:?}",
            s.version()
        );
    }
}

/// Every command of the table answers `COMMAND DOCS` with its summary, complexity and arguments,
/// and `COMMAND INFO` with its arity, flags, ACL categories (where the server takes them) and key
/// access.
#[test]
fn command_docs_and_info_are_the_table() {
    let s = Server::start();
    let d = Docs::of(&s);
    let categories = s.version().redis_at_least(7, 2);
    let mut c = s.client();
    for command in table() {
        let name = field(&command, "name");
        let docs = render(&harness::call(&mut c, &["COMMAND", "DOCS", name]));
        assert_eq!(
            docs,
            format!(
                "[{name} [summary {} since 1.0.0 group module complexity {} module slidingwindow \
                 arguments {}]]",
                field(&command, "summary"),
                field(&command, "complexity"),
                d.table_args(arguments(&command)),
            ),
            "COMMAND DOCS {name} on {:?}",
            s.version()
        );
        let Value::Array(info) = harness::call(&mut c, &["COMMAND", "INFO", name]) else {
            panic!("COMMAND INFO {name}: not an array");
        };
        let Some(Value::Array(info)) = info.first() else {
            panic!("COMMAND INFO {name}: {info:?}");
        };
        let arity = command["arity"].as_i64().expect("an integer arity");
        assert_eq!(render(&info[1]), arity.to_string(), "arity of {name}");
        let counted = field(&command, "keys") == "counted";
        let mut flags: Vec<String> = field(&command, "flags")
            .split_whitespace()
            .map(|f| format!("+{}", f.replace('-', "")))
            .chain(["+module".to_string()])
            .chain(counted.then(|| "+movablekeys".to_string()))
            .collect();
        flags.sort();
        let mut shown: Vec<String> = render(&info[2])
            .trim_matches(['[', ']'])
            .split_whitespace()
            .map(str::to_string)
            .collect();
        shown.sort();
        assert_eq!(shown, flags, "flags of {name}");
        let acl: Vec<String> = match categories {
            true => field(&command, "acl")
                .split_whitespace()
                .map(|c| format!("+@{c}"))
                .collect(),
            false => Vec::new(),
        };
        let shown = render(&info[6]);
        let shown: Vec<&str> = shown
            .trim_matches(['[', ']'])
            .split_whitespace()
            .filter(|c| *c != "+@slidingwindow")
            .collect();
        assert_eq!(shown, acl, "ACL categories of {name}");
        let key_specs = render(&info[8]);
        let access = match (field(&command, "keys"), field(&command, "access")) {
            ("none", _) => "[]",
            (_, "read") => "flags [+RO +access]",
            (_, "update") => "flags [+RW +access +update]",
            (keys, access) => panic!("{name}: keys {keys}, access {access}"),
        };
        assert!(
            key_specs.contains(access),
            "key specs of {name}: {key_specs}"
        );
    }
}

/// docs/commands.md lists every command of the table with its syntax, arity and summary, as
/// `command_list` prints them.
#[test]
fn the_command_reference_lists_the_table() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/commands.md"))
        .expect("docs/commands.md");
    let list = command_list();
    assert!(
        doc.contains(&list),
        "docs/commands.md should hold the command list:\n\n{list}"
    );
}

/// The markdown table of the commands: syntax, arity, summary.
fn command_list() -> String {
    let mut out = String::from("| Command | Arity | Summary |\n|---|---|---|\n");
    for command in table() {
        let line = format!(
            "{} {}",
            field(&command, "name").to_uppercase(),
            syntax(arguments(&command))
        );
        out += &format!(
            "| `{}` | {} | {} |\n",
            line.trim_end().replace('|', "\\|"),
            command["arity"],
            field(&command, "summary")
        );
    }
    out
}

/// The clis' hint of ALLOW is the table's syntax.
#[test]
fn the_syntax_is_the_table_s() {
    let allow = table()
        .into_iter()
        .find(|c| field(c, "name") == "slidingwindow.allow")
        .expect("ALLOW in the table");
    assert_eq!(syntax(arguments(&allow)), SYNTAX);
}

/// `COMMAND DOCS` of ALLOWALL, PEEKALL and REFUND list every argument; `COMMAND GETKEYS` finds
/// every key of a call (numkeys of them after the count, as EVAL's), and `COMMAND INFO` marks
/// the several-key commands `movablekeys`.
#[test]
fn the_several_key_commands_declare_their_keys_and_arguments() {
    let s = Server::start();
    let d = Docs::of(&s);
    let all_args = format!(
        "[{} {} {} {} [name limit type block token LIMIT flags [+multiple +multiple_token] \
         arguments [{} {}]] {}]",
        d.arg("numkeys", "integer", ""),
        d.arg("key", "key", " key_spec_index 0 flags [+multiple]"),
        d.one_of("now", "now"),
        d.cost(),
        d.arg("keyno", "integer", ""),
        d.window_max(),
        d.options(),
    );
    let refund_args = format!(
        "[{} {} {}]",
        d.arg("key", "key", " key_spec_index 0"),
        d.arg("n", "integer", ""),
        d.one_of("at", "ts"),
    );
    let mut c = s.client();
    for (name, args) in [
        ("slidingwindow.allowall", &all_args),
        ("slidingwindow.peekall", &all_args),
        ("slidingwindow.refund", &refund_args),
    ] {
        let docs = render(&harness::call(&mut c, &["COMMAND", "DOCS", name]));
        assert!(
            docs.ends_with(&format!("module slidingwindow arguments {args}]]")),
            "COMMAND DOCS {name} on {:?}: {docs}",
            s.version()
        );
    }
    let getkeys = |c: &mut redis::Connection, args: &[&str]| {
        let mut all = vec!["COMMAND", "GETKEYS"];
        all.extend(args);
        render(&harness::call(c, &all))
    };
    for cmd in ["SLIDINGWINDOW.ALLOWALL", "SLIDINGWINDOW.PEEKALL"] {
        let line = [cmd, "3", "{t}:u", "{t}", "g", "*", "LIMIT", "1", "1", "1"];
        assert_eq!(getkeys(&mut c, &line), "[{t}:u {t} g]", "{cmd}");
        let line = [cmd, "1", "k", "5", "COST", "2", "LIMIT", "1", "1", "1"];
        assert_eq!(getkeys(&mut c, &line), "[k]", "{cmd}");
    }
    let line = ["SLIDINGWINDOW.REFUND", "k", "1", "AT", "5"];
    assert_eq!(getkeys(&mut c, &line), "[k]");
    for (name, movable) in [
        ("slidingwindow.allowall", true),
        ("slidingwindow.peekall", true),
        ("slidingwindow.refund", false),
        ("slidingwindow.allow", false),
    ] {
        let info = render(&harness::call(&mut c, &["COMMAND", "INFO", name]));
        assert_eq!(info.contains("+movablekeys"), movable, "{name}: {info}");
    }
}

/// Removes the terminal's escape sequences (`ESC [ ... letter`) and carriage returns.
fn plain(raw: &str) -> String {
    let mut out = String::new();
    let mut chars = raw.chars().peekable();
    while let Some(ch) = chars.next() {
        match ch {
            '\x1b' if chars.peek() == Some(&'[') => {
                for c in chars.by_ref() {
                    if c.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
            '\r' => {}
            _ => out.push(ch),
        }
    }
    out
}

/// redis-cli 7.0 builds `HELP` from `COMMAND DOCS` (as valkey-cli does).
#[test]
fn cli_help_prints_the_arguments() {
    let s = Server::start();
    for (cmd, summary) in [
        (
            "SLIDINGWINDOW.ALLOW",
            "Trims the sliding-window log, counts it, and logs the request if it fits",
        ),
        (
            "SLIDINGWINDOW.PEEK",
            "Answers what SLIDINGWINDOW.ALLOW would, changing nothing",
        ),
    ] {
        let out = s.cli(&["HELP", cmd]);
        assert_eq!(
            plain(&out),
            format!(
                "\n  {cmd} {SYNTAX}\n  summary: {summary}\n  since: 1.0.0\n  group: module\n\n"
            ),
            "HELP {cmd}: {out:?}"
        );
    }
}

/// An interactive cli in a pseudo-terminal (`script` makes one); what it prints is collected.
struct Terminal {
    child: Child,
    input: ChildStdin,
    screen: Arc<Mutex<Vec<u8>>>,
    reader: Option<JoinHandle<()>>,
}

impl Terminal {
    fn start(cli: &str, port: u16) -> Terminal {
        // Without a width linenoise asks the terminal for its cursor position, and nothing here
        // would answer: `stty` gives the pseudo-terminal one.
        let shell = format!("stty cols 300 rows 50; exec '{cli}' -p {port}");
        let mut child = Command::new("script")
            .args(["-qfc", &shell, "/dev/null"])
            // A plain terminal, and no history or rc file of the user's read or written (valkey-cli
            // reads the same variables).
            .env("TERM", "xterm")
            .env("REDISCLI_HISTFILE", "/dev/null")
            .env("REDISCLI_RCFILE", "/dev/null")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("run `script` (util-linux) to give the cli a pseudo-terminal");
        let input = child.stdin.take().expect("stdin");
        let mut output = child.stdout.take().expect("stdout");
        let screen = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&screen);
        let reader = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = output.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        Terminal {
            child,
            input,
            screen,
            reader: Some(reader),
        }
    }

    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.screen.lock().unwrap()).into_owned()
    }

    fn wait_for(&self, what: &str) {
        wait_until(
            STARTUP_DEADLINE,
            &format!("the cli to print {what:?}"),
            || self.screen().contains(what),
        );
    }

    fn type_keys(&mut self, keys: &str) {
        self.input.write_all(keys.as_bytes()).expect("type");
        self.input.flush().expect("flush");
    }

    /// Waits until the line reads `prompt + typed` followed by a grey hint starting with `hint`.
    fn wait_for_hint(&self, prompt: &str, typed: &str, hint: &str) {
        // linenoise redraws the whole line at each key; the hint is in grey after the input.
        let shown = format!("{prompt}{typed}\x1b[0;90;49m{hint}");
        wait_until(
            STARTUP_DEADLINE,
            &format!("the hint {hint:?} after {typed:?}"),
            || self.screen().contains(&shown),
        );
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
    }
}

/// Whether the cli matches typed arguments against the argument specs (redis-cli >= 7.2 and
/// valkey-cli) or, like redis-cli 7.0, drops one word of the syntax per word typed.
fn cli_matches_arguments(cli: &str) -> bool {
    let out = Command::new(cli)
        .arg("--version")
        .output()
        .expect("cli --version");
    let version = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut words = version.split_whitespace();
    let (name, number) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let mut parts = number.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    match name {
        "valkey-cli" => true,
        "redis-cli" => (major, minor) >= (7, 2),
        _ => panic!("unknown cli {version:?}"),
    }
}

#[test]
fn the_interactive_cli_hints_the_arguments() {
    let s = Server::start();
    let cli = harness::redis_cli_bin();
    let mut term = Terminal::start(&cli, s.port());
    let prompt = format!("127.0.0.1:{}> ", s.port());
    // Typed before the prompt, keys would be flushed when the cli switches the terminal to raw.
    term.wait_for(&prompt);
    let mut typed = String::from("SLIDINGWINDOW.ALLOW ");
    term.type_keys(&typed);
    term.wait_for_hint(&prompt, &typed, &format!("{SYNTAX}\x1b[0m"));
    term.type_keys("k 10 ");
    typed.push_str("k 10 ");
    let rest = SYNTAX.trim_start_matches("key window ");
    term.wait_for_hint(&prompt, &typed, &format!("{rest}\x1b[0m"));
    if cli_matches_arguments(&cli) {
        // Past the optional COST, the cli knows a LIMIT block comes next, and that it repeats.
        term.type_keys("5 * COST 2 LIMIT ");
        typed.push_str("5 * COST 2 LIMIT ");
        term.wait_for_hint(&prompt, &typed, "window max [LIMIT window max ...]");
    }
    // Clear the line and leave; a cli that does not exit is killed on drop.
    term.type_keys("\x15exit\r");
    wait_until(STARTUP_DEADLINE, "the cli to exit", || {
        matches!(term.child.try_wait(), Ok(Some(_)))
    });
}
