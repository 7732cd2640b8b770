//! Generates the command table (`$OUT_DIR/commands.rs`) from `src/cmd/commands.json`, so the
//! module reads no JSON when it loads: each command becomes a `Command` literal, its arguments
//! `Arg` constructors, and a field the table does not know fails the build. The commands with
//! their groups spliced in (`$OUT_DIR/commands.json`) are what the tests compare against.

use serde_json::{Map, Value};
use std::fmt::Write as _;
use std::path::Path;

const SOURCE: &str = "src/cmd/commands.json";

fn main() {
    println!("cargo::rerun-if-changed={SOURCE}");
    println!("cargo::rerun-if-changed=build.rs");
    let text = std::fs::read_to_string(SOURCE).unwrap_or_else(|e| panic!("{SOURCE}: {e}"));
    let data: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{SOURCE}: {e}"));
    let commands = expand(&data).unwrap_or_else(|e| panic!("{SOURCE}: {e}"));
    let code = table(&commands).unwrap_or_else(|e| panic!("{SOURCE}: {e}"));
    let out = Path::new(&std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).to_path_buf();
    std::fs::write(out.join("commands.rs"), code).expect("write commands.rs");
    let json = serde_json::to_string_pretty(&commands).expect("serialise the commands");
    std::fs::write(out.join("commands.json"), json).expect("write commands.json");
}

/// The commands, each argument list with the groups it names spliced in.
fn expand(data: &Value) -> Result<Value, String> {
    let top = object(data, "the file")?;
    known(top, &["about", "groups", "commands"], "the file")?;
    let groups = object(top.get("groups").unwrap_or(&Value::Null), "groups")?;
    let commands = top.get("commands").ok_or("no `commands` list")?;
    splice(commands, groups)
}

/// `v` with every `arguments` list's group names replaced by the groups' arguments.
fn splice(v: &Value, groups: &Map<String, Value>) -> Result<Value, String> {
    Ok(match v {
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|item| splice(item, groups))
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(o) => {
            let mut out = Map::new();
            for (k, item) in o {
                let item = match (k.as_str(), item) {
                    ("arguments", Value::Array(list)) => Value::Array(arguments(list, groups)?),
                    _ => splice(item, groups)?,
                };
                out.insert(k.clone(), item);
            }
            Value::Object(out)
        }
        other => other.clone(),
    })
}

/// An argument list with each group name replaced by that group's arguments.
fn arguments(list: &[Value], groups: &Map<String, Value>) -> Result<Vec<Value>, String> {
    let mut all = Vec::new();
    for a in list {
        match a {
            Value::String(g) => {
                let group = groups.get(g).and_then(Value::as_array);
                all.extend(arguments(
                    group.ok_or(format!("no group list `{g}`"))?,
                    groups,
                )?);
            }
            other => all.push(splice(other, groups)?),
        }
    }
    Ok(all)
}

/// The table as Rust: `pub const COMMANDS: [Command; n] = [...];`.
fn table(commands: &Value) -> Result<String, String> {
    let commands = commands.as_array().ok_or("`commands` is not a list")?;
    let mut code = format!("pub const COMMANDS: [Command; {}] = [\n", commands.len());
    for command in commands {
        code += &entry(command)?;
    }
    code += "];\n";
    Ok(code)
}

/// One command's `Command` literal.
fn entry(command: &Value) -> Result<String, String> {
    let c = object(command, "a command")?;
    let name = text(c, "name")?;
    let fields = [
        "name",
        "summary",
        "complexity",
        "arity",
        "flags",
        "flags_note",
        "acl",
        "acl_note",
        "keys",
        "access",
        "arguments",
    ];
    known(c, &fields, name)?;
    let keys = match text(c, "keys")? {
        "one" => "One",
        "counted" => "Counted",
        "none" => "None",
        other => return Err(format!("{name}: keys `{other}` (one, counted or none)")),
    };
    let access = match text(c, "access")? {
        "read" => "Read",
        "update" => "Update",
        other => return Err(format!("{name}: access `{other}` (read or update)")),
    };
    let arity = c
        .get("arity")
        .and_then(Value::as_i64)
        .ok_or(format!("{name}: no integer `arity`"))?;
    Ok(format!(
        "    Command {{\n        name: {},\n        summary: {},\n        complexity: {},\n        \
         arity: {arity},\n        flags: {},\n        acl: {},\n        keys: Keys::{keys},\n        \
         access: Access::{access},\n        args: {},\n    }},\n",
        cstr(name),
        cstr(text(c, "summary")?),
        cstr(text(c, "complexity")?),
        cstr(text(c, "flags")?),
        cstr(text(c, "acl")?),
        args(c.get("arguments"), name)?,
    ))
}

/// An argument list as `&[Arg::..., ...]`.
fn args(list: Option<&Value>, name: &str) -> Result<String, String> {
    let list = list
        .and_then(Value::as_array)
        .ok_or(format!("{name}: no `arguments` list"))?;
    let mut code = String::from("&[");
    for item in list {
        code += &arg(item, name)?;
    }
    code += "]";
    Ok(code)
}

/// One argument as its `Arg` constructor, followed by a comma.
fn arg(item: &Value, command: &str) -> Result<String, String> {
    let a = object(item, command)?;
    let fields = ["name", "type", "token", "optional", "multiple", "arguments"];
    known(a, &fields, command)?;
    let name = cstr(text(a, "name")?);
    let sub = || args(a.get("arguments"), command);
    let token = match a.get("token") {
        None => None,
        Some(Value::String(t)) => Some(cstr(t)),
        Some(_) => return Err(format!("{command} {name}: `token` is not a string")),
    };
    let mut code = match (text(a, "type")?, &token) {
        ("key", _) => format!("Arg::key({name})"),
        ("integer", _) => format!("Arg::integer({name})"),
        ("string", _) => format!("Arg::string({name})"),
        ("pure-token", Some(t)) => format!("Arg::pure_token({name}, {t})"),
        ("oneof", _) => format!("Arg::one_of({name}, {})", sub()?),
        ("block", _) => format!("Arg::block({name}, {})", sub()?),
        (other, _) => return Err(format!("{command} {name}: type `{other}` (with its token)")),
    };
    if let Some(t) = token
        && text(a, "type")? != "pure-token"
    {
        let _ = write!(code, ".token({t})");
    }
    for flag in ["optional", "multiple"] {
        if a.get(flag).and_then(Value::as_bool).unwrap_or(false) {
            let _ = write!(code, ".{flag}()");
        }
    }
    Ok(code + ", ")
}

fn object<'a>(v: &'a Value, what: &str) -> Result<&'a Map<String, Value>, String> {
    v.as_object().ok_or(format!("{what} is not an object"))
}

fn text<'a>(o: &'a Map<String, Value>, field: &str) -> Result<&'a str, String> {
    o.get(field)
        .and_then(Value::as_str)
        .ok_or(format!("no string `{field}` in {o:?}"))
}

/// Fails on a field the table does not read (a typo would otherwise be dropped silently).
fn known(o: &Map<String, Value>, fields: &[&str], what: &str) -> Result<(), String> {
    match o.keys().find(|k| !fields.contains(&k.as_str())) {
        Some(k) => Err(format!("{what}: unknown field `{k}`")),
        None => Ok(()),
    }
}

/// A C string literal: `c"..."`, escaped as Rust's `{:?}` escapes a string.
fn cstr(s: &str) -> String {
    let mut out = String::from("c");
    let _ = write!(out, "{s:?}");
    out
}
