//! ACL categories: ALLOW, ALLOWALL and REFUND are `@write @slow`, PEEK and PEEKALL `@read @fast`,
//! all in `@slidingwindow`, where the server lets a module say so; the rules docs/operating.md
//! gives per server version. Key patterns check every key of ALLOWALL / PEEKALL.

use testkit::client;
use testkit::harness;

use client::{client_as, error_code, five, q};
use harness::{Server, call};

/// What the server lets a module declare.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Support {
    /// Redis 7.0 / 7.1: no categories; users name the commands.
    Names,
    /// Redis 7.2 / 7.3: `RedisModule_SetCommandACLCategories`.
    Categories,
    /// Redis >= 7.4, Valkey 8: also `RedisModule_AddACLCategory`.
    ModuleCategory,
}

/// A server, and what its ACL supports.
fn started() -> (Server, Support) {
    let s = Server::start();
    let support = support(&s);
    (s, support)
}

/// Each role with a user name of its own, `prefix` and the role's index.
fn users(prefix: &str) -> impl Iterator<Item = (String, Role)> {
    Role::ALL
        .into_iter()
        .enumerate()
        .map(move |(i, role)| (format!("{prefix}{i}"), role))
}

fn support(s: &Server) -> Support {
    let v = s.version();
    if v.redis_at_least(7, 4) || v.valkey_at_least(8) {
        Support::ModuleCategory
    } else if v.redis_at_least(7, 2) {
        Support::Categories
    } else {
        assert!(
            !v.valkey && (v.major, v.minor) >= (7, 0),
            "unexpected server {v:?}"
        );
        Support::Names
    }
}

/// A role, and what it may run.
#[derive(Debug, Clone, Copy)]
enum Role {
    /// Reads only: PEEK.
    Read,
    /// Writes only: ALLOW.
    Write,
    Both,
    /// Everything but writes.
    AllButWrites,
    /// This module's commands and nothing else.
    Module,
}

impl Role {
    const ALL: [Role; 5] = [
        Role::Read,
        Role::Write,
        Role::Both,
        Role::AllButWrites,
        Role::Module,
    ];

    /// (may PEEK, may ALLOW)
    fn grants(self) -> (bool, bool) {
        match self {
            Role::Read | Role::AllButWrites => (true, false),
            Role::Write => (false, true),
            Role::Both | Role::Module => (true, true),
        }
    }

    /// The rule by categories alone, as on any other command.
    fn by_category(self) -> &'static str {
        match self {
            Role::Read => "+@read",
            Role::Write => "+@write",
            Role::Both => "+@read +@write",
            Role::AllButWrites => "+@all -@write",
            Role::Module => "+@slidingwindow -@dangerous",
        }
    }

    /// The rule docs/operating.md gives for this role on a server of `support`.
    fn documented(self, support: Support) -> &'static str {
        match (support, self) {
            (Support::ModuleCategory, role) => role.by_category(),
            (Support::Categories, Role::Module) | (Support::Names, Role::Module) => {
                "+slidingwindow.allow +slidingwindow.peek +slidingwindow.allowall \
                 +slidingwindow.peekall +slidingwindow.refund"
            }
            (Support::Categories, role) => role.by_category(),
            (Support::Names, Role::Read) => "+@read +slidingwindow.peek +slidingwindow.peekall",
            (Support::Names, Role::Write) => {
                "+@write +slidingwindow.allow +slidingwindow.allowall +slidingwindow.refund"
            }
            (Support::Names, Role::Both) => {
                "+@read +@write +slidingwindow.allow +slidingwindow.peek +slidingwindow.allowall \
                 +slidingwindow.peekall +slidingwindow.refund"
            }
            (Support::Names, Role::AllButWrites) => {
                "+@all -@write -slidingwindow.allow -slidingwindow.allowall -slidingwindow.refund"
            }
        }
    }
}

/// Creates `user` (password `pw`) with `keys` and `rule`; the server's reply to `ACL SETUSER`.
fn set_user(s: &Server, user: &str, keys: &str, rule: &str) -> redis::Value {
    let mut args = vec!["ACL", "SETUSER", user, "reset", "on", ">pw", keys];
    args.extend(rule.split(' '));
    call(&mut s.client(), &args)
}

/// (PEEK answered, ALLOW answered) for `user` on `key`; PEEKALL answers as PEEK does, ALLOWALL
/// and REFUND as ALLOW does. Anything else than NOPERM or the command's reply fails.
fn may(s: &Server, user: &str, key: &str) -> (bool, bool) {
    let mut con = client_as(s, user);
    let mut answered = |args: &[&str]| {
        let v = call(&mut con, args);
        if five(&v).is_some() || matches!(v, redis::Value::Array(_) | redis::Value::Int(_)) {
            return true;
        }
        assert_eq!(error_code(&v), "NOPERM", "{user}: {args:?}: {v:?}");
        false
    };
    let peek = answered(&["SLIDINGWINDOW.PEEK", key, "3600", "1000", "1000"]);
    let allow = answered(&["SLIDINGWINDOW.ALLOW", key, "3600", "1000", "1000"]);
    let all = |cmd| [cmd, "1", key, "1000", "LIMIT", "1", "3600", "1000"];
    assert_eq!(
        answered(&all("SLIDINGWINDOW.PEEKALL")),
        peek,
        "{user}: PEEKALL {key}"
    );
    assert_eq!(
        answered(&all("SLIDINGWINDOW.ALLOWALL")),
        allow,
        "{user}: ALLOWALL {key}"
    );
    let refund = ["SLIDINGWINDOW.REFUND", key, "1", "AT", "0"];
    assert_eq!(answered(&refund), allow, "{user}: REFUND {key}");
    (peek, allow)
}

fn acl_cat(s: &Server, category: &str) -> Vec<String> {
    let mut names: Vec<String> = q(&mut s.client(), &["ACL", "CAT", category]);
    names.retain(|n| n.starts_with("slidingwindow.") || n.starts_with("sw."));
    names.sort();
    names
}

#[test]
fn the_documented_rules_grant_each_role_exactly() {
    let (s, support) = started();
    for (user, role) in users("documented") {
        let rule = role.documented(support);
        assert_eq!(
            set_user(&s, &user, "~*", rule),
            redis::Value::Okay,
            "{rule}"
        );
        assert_eq!(
            may(&s, &user, "rate:x"),
            role.grants(),
            "{support:?}: {role:?} as `{rule}`"
        );
    }
}

/// Where the server takes categories, a role by categories alone works as for any other
/// command; on Redis 7.0 such a rule does not reach the module's commands (hence the names in
/// the documented rules), and `@slidingwindow` does not exist.
#[test]
fn categories_alone_reach_the_commands_where_the_server_has_them() {
    let (s, support) = started();
    for (user, role) in users("bycategory") {
        let rule = role.by_category();
        let reply = set_user(&s, &user, "~*", rule);
        let expected = match (support, role) {
            (Support::ModuleCategory, _) => role.grants(),
            (_, Role::Module) => {
                assert_eq!(
                    error_code(&reply),
                    "ERR",
                    "{support:?}: `{rule}`: {reply:?}"
                );
                continue;
            }
            (Support::Categories, _) => role.grants(),
            // No category holds them: only `+@all` does.
            (Support::Names, Role::AllButWrites) => (true, true),
            (Support::Names, _) => (false, false),
        };
        assert_eq!(reply, redis::Value::Okay, "{rule}");
        assert_eq!(
            may(&s, &user, "rate:x"),
            expected,
            "{support:?}: {role:?} as `{rule}`"
        );
    }
}

#[test]
fn acl_cat_lists_the_commands_in_their_categories() {
    let (s, support) = started();
    // APPLY's short name stands beside it (sorted after every `slidingwindow.` name).
    let names = |names: &[&str]| -> Vec<String> {
        let mut out: Vec<String> = names.iter().map(|n| format!("slidingwindow.{n}")).collect();
        if names.contains(&"apply") {
            out.push("sw.apply".to_string());
        }
        out
    };
    let (writers, peek) = (
        names(&["allow", "allowall", "apply", "convert", "refund"]),
        names(&["peek", "peekall"]),
    );
    let none: Vec<String> = Vec::new();
    let listed = [
        ("write", &writers),
        (
            "slow",
            &names(&["allow", "allowall", "apply", "convert", "refund", "top"]),
        ),
        ("read", &names(&["peek", "peekall", "top"])),
        ("fast", &peek),
        ("admin", &names(&["topreset"])),
        ("dangerous", &names(&["apply", "topreset"])),
    ];
    for (category, expected) in listed {
        let want = if support == Support::Names {
            &none
        } else {
            expected
        };
        assert_eq!(
            &acl_cat(&s, category),
            want,
            "{support:?}: ACL CAT {category}"
        );
    }
    let categories: Vec<String> = q(&mut s.client(), &["ACL", "CAT"]);
    let has_own = categories.iter().any(|c| c == "slidingwindow");
    assert_eq!(
        has_own,
        support == Support::ModuleCategory,
        "{categories:?}"
    );
    if has_own {
        assert_eq!(
            acl_cat(&s, "slidingwindow"),
            names(&[
                "allow", "allowall", "apply", "convert", "peek", "peekall", "refund", "top",
                "topreset"
            ])
        );
    }
}

/// `+@slidingwindow` (or its fallback) grants this module's commands and nothing else. (A module
/// that exports a data type cannot be unloaded, so there is no reload to survive.)
#[test]
fn the_module_role_grants_only_this_module() {
    let (s, support) = started();
    let rule = Role::Module.documented(support);
    let user = "module1";
    assert_eq!(set_user(&s, user, "~*", rule), redis::Value::Okay, "{rule}");
    assert_eq!(
        may(&s, user, "rate:x"),
        (true, true),
        "{support:?}: `{rule}`"
    );
    let mut con = client_as(&s, user);
    for other in [
        &["ZCARD", "rate:x"][..],
        &["SET", "rate:y", "1"],
        &["DBSIZE"],
        &["SLIDINGWINDOW.APPLY", "rate:x", "-1 0"],
        &["SW.APPLY", "rate:x", "-1 0"],
    ] {
        let v = call(&mut con, other);
        assert_eq!(error_code(&v), "NOPERM", "{rule}: {other:?}: {v:?}");
    }
}

/// Every key of an ALLOWALL / PEEKALL must match the user's patterns: one key outside refuses
/// the call, and `%R~` keys admit PEEKALL but not ALLOWALL.
#[test]
fn key_patterns_check_every_key_of_a_call() {
    let s = Server::start();
    let cases = [
        ("~{r}*", [true, true, true, true]),
        ("%R~{r}*", [true, false, false, false]),
        ("~{r}a", [false, false, true, true]),
    ];
    for (i, (keys, want)) in cases.into_iter().enumerate() {
        let user = format!("all{i}");
        assert_eq!(set_user(&s, &user, keys, "+@all"), redis::Value::Okay);
        let mut con = client_as(&s, &user);
        let calls = [
            "SLIDINGWINDOW.PEEKALL 2 {r}a {r}b 1000 LIMIT 1 60 5 LIMIT 2 60 5",
            "SLIDINGWINDOW.ALLOWALL 2 {r}a {r}b 1000 LIMIT 1 60 5 LIMIT 2 60 5",
            "SLIDINGWINDOW.ALLOWALL 1 {r}a 1000 LIMIT 1 60 5",
            "SLIDINGWINDOW.REFUND {r}a 1",
        ];
        for (line, may) in calls.into_iter().zip(want) {
            let args: Vec<&str> = line.split(' ').collect();
            let v = call(&mut con, &args);
            if may {
                assert!(
                    matches!(v, redis::Value::Array(_) | redis::Value::Int(_)),
                    "{keys}: {args:?}: {v:?}"
                );
            } else {
                assert_eq!(error_code(&v), "NOPERM", "{keys}: {args:?}: {v:?}");
            }
        }
    }
}

/// Categories grant commands; key patterns still decide which keys, and `%R~` (read-only keys)
/// admits PEEK but not ALLOW.
#[test]
fn key_patterns_still_apply_on_top_of_categories() {
    let (s, support) = started();
    let (both, module) = (
        Role::Both.documented(support),
        Role::Module.documented(support),
    );
    // (keys, rule, [(key, (may PEEK, may ALLOW))])
    let cases = [
        (
            "~rate:*",
            both,
            [
                ("rate:x", (true, true)),
                ("other:x", (false, false)),
                ("RATE:x", (false, false)),
            ],
        ),
        (
            "%R~rate:*",
            both,
            [
                ("rate:x", (true, false)),
                ("other:x", (false, false)),
                ("rate", (false, false)),
            ],
        ),
        (
            "~rate:*",
            module,
            [
                ("rate:x", (true, true)),
                ("other:x", (false, false)),
                ("rate", (false, false)),
            ],
        ),
    ];
    for (i, (keys, rule, checks)) in cases.into_iter().enumerate() {
        let user = format!("keys{i}");
        assert_eq!(set_user(&s, &user, keys, rule), redis::Value::Okay);
        for (key, expected) in checks {
            assert_eq!(
                may(&s, &user, key),
                expected,
                "{support:?}: `{keys} {rule}` on {key}"
            );
        }
    }
}
