//! A seeded fuzz run against a live server: every reply an error or five integers, and the
//! sentinel keys around it untouched.

use super::*;

/// What the fuzzer knows about a token it generated.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Tok {
    /// A plain decimal integer with this value.
    Num(u64),
    /// `*`.
    Star,
    /// Not an integer by any reading.
    Junk,
    /// Readable either way (e.g. leading zeros): the call is not judged on its validity.
    Unsure,
}

/// A numeric argument: from anywhere when `wild`, else almost always a plausible value.
fn number(rng: &mut Rng, wild: bool) -> (Vec<u8>, Tok) {
    let exact = |n: u64| (n.to_string().into_bytes(), Tok::Num(n));
    let junk = |s: &str| (s.as_bytes().to_vec(), Tok::Junk);
    if !wild {
        return match rng.next() % 20 {
            0..12 => exact(rng.range(1, 20)),
            12..17 => exact(rng.range(1, 5000)),
            17..19 => exact(rng.range(1_700_000_000_000, 1_700_000_100_000)),
            // `*` is only valid as `now`; elsewhere it is one more error.
            _ => (b"*".to_vec(), Tok::Star),
        };
    }
    match rng.next() % 40 {
        0..12 => exact(rng.range(1, 20)),
        12..15 => exact(rng.range(0, 5000)),
        15 => exact(0),
        16 => exact(MAX_EXACT),
        17 => exact(MAX_EXACT + 1),
        18 => exact(MAX_EXACT - 1),
        19 => exact(MAX_WINDOW),
        20 => exact(MAX_WINDOW + 1),
        21 => exact(u64::MAX),
        22 => exact(rng.range(1_700_000_000_000, 1_700_000_100_000)),
        23 => junk("18446744073709551616"),
        24 => junk(&"9".repeat(rng.range(20, 300) as usize)),
        25 => junk(rng.pick(&["-1", "-0", "+5", " 5", "5 ", "-9007199254740992"])),
        26 => junk(rng.pick(&["1e3", "1.5", "0.0", "1.", ".5", "1E2", "0x10"])),
        27 => junk(rng.pick(&["inf", "-inf", "+inf", "nan", "NaN", "infinity", "Infinity"])),
        28 => junk(rng.pick(&["", "**", "*1", "x", "COST", "\u{ff15}", "1\u{0}", "1\r\n2"])),
        29 => (b"*".to_vec(), Tok::Star),
        30 => (format!("00{}", rng.range(0, 50)).into_bytes(), Tok::Unsure),
        31 => {
            let len = rng.range(0, 24) as usize;
            let bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            let all_digits = !bytes.is_empty() && bytes.iter().all(u8::is_ascii_digit);
            let tok = if all_digits || bytes == b"*" {
                Tok::Unsure
            } else {
                Tok::Junk
            };
            (bytes, tok)
        }
        _ => exact(rng.range(1, 100)),
    }
}

/// A generated call and the errors it must be refused with, in the order the arguments are
/// checked (empty: it must succeed).
struct Case {
    args: Vec<Vec<u8>>,
    problems: Vec<String>,
    unsure: bool,
    wrong_type: bool,
    max: Option<u64>,
    cost: u64,
}

fn case(rng: &mut Rng) -> Case {
    let name = rng.pick(&[
        "SLIDINGWINDOW.ALLOW",
        "SLIDINGWINDOW.PEEK",
        "slidingwindow.allow",
        "SlidingWindow.Peek",
    ]);
    let key: Vec<u8> = match rng.next() % 20 {
        0 => b"fz:str".to_vec(),
        1 => b"fz:hash".to_vec(),
        2..4 => {
            let mut k = b"fz:".to_vec();
            k.extend((0..rng.range(0, 12)).map(|_| rng.next() as u8));
            k
        }
        _ => format!("fz:{}", rng.range(0, 7)).into_bytes(),
    };
    let wrong_type = key == b"fz:str" || key == b"fz:hash";
    let wild = rng.chance(50);
    let mut args = vec![name.as_bytes().to_vec(), key];
    let mut toks = Vec::new();
    for _ in 0..3 {
        let (bytes, tok) = number(rng, wild);
        args.push(bytes);
        toks.push(tok);
    }
    let mut problems = Vec::new();
    let mut unsure = false;
    // Random arity: sometimes cut short, sometimes followed by options in any order.
    let truncated = rng.chance(8);
    if truncated {
        args.truncate(rng.range(1, 4) as usize);
        problems.push(format!(
            "ERR wrong number of arguments for '{}' command",
            name.to_ascii_lowercase()
        ));
    } else {
        let checks: [(&str, u64, u64, bool); 3] = [
            (BAD_WINDOW, 1, MAX_WINDOW, false),
            (BAD_MAX, 1, MAX_EXACT, false),
            (BAD_NOW, 0, MAX_EXACT, true),
        ];
        for ((what, lo, hi, star), tok) in checks.iter().zip(&toks) {
            match *tok {
                Tok::Num(n) if (*lo..=*hi).contains(&n) => {}
                Tok::Star if *star => {}
                Tok::Unsure => unsure = true,
                _ => problems.push(what.to_string()),
            }
        }
    }
    let mut cost = 1;
    if !wild && !truncated {
        if rng.chance(30) {
            cost = rng.range(1, 10);
            let name = rng.pick(&["COST", "cost", "CoSt"]);
            args.extend([name.as_bytes().to_vec(), cost.to_string().into_bytes()]);
        }
    } else if !truncated && (problems.is_empty() || rng.chance(50)) {
        let mut seen_cost = false;
        for _ in 0..rng.pick(&[0, 0, 0, 1, 1, 1, 2, 3]) {
            match rng.next() % 10 {
                0..6 => {
                    let word = rng.pick(&["COST", "cost", "CoSt"]);
                    args.push(word.as_bytes().to_vec());
                    if seen_cost {
                        problems.push(format!("ERR syntax error, option '{word}' given twice"));
                    }
                    seen_cost = true;
                    // A missing value, only possible as the last word.
                    if rng.chance(5) {
                        problems.push(format!("ERR syntax error, option '{word}' needs a value"));
                        break;
                    }
                    let (mut bytes, mut tok) = number(rng, wild);
                    // Keep admitted batches small so the run stays fast; huge costs stay huge.
                    if let Tok::Num(n @ 21..=MAX_ADD_PER_CALL) = tok {
                        tok = Tok::Num(n % 20 + 1);
                        bytes = (n % 20 + 1).to_string().into_bytes();
                    }
                    args.push(bytes);
                    match tok {
                        Tok::Num(n) if (1..=MAX_EXACT).contains(&n) => cost = n,
                        Tok::Unsure => unsure = true,
                        _ => problems.push(BAD_COST.to_string()),
                    }
                }
                6..8 => {
                    let (bytes, _) = number(rng, wild);
                    // A stray word that happens to read COST is the option, not junk.
                    let stray = if bytes.eq_ignore_ascii_case(b"COST") {
                        b"x".to_vec()
                    } else {
                        bytes
                    };
                    problems.push(format!(
                        "ERR syntax error, unknown option '{}'",
                        quoted(&stray)
                    ));
                    args.push(stray);
                }
                _ => {
                    let word = rng.pick(&["EX", "NX", "COSTS", ""]);
                    args.push(word.as_bytes().to_vec());
                    problems.push(format!("ERR syntax error, unknown option '{word}'"));
                }
            }
        }
    }
    let max = match toks[1] {
        Tok::Num(n) => Some(n),
        _ => None,
    };
    Case {
        args,
        problems,
        unsure,
        wrong_type,
        max,
        cost,
    }
}

/// Judges one reply against what the contract allows for `c`.
fn judge(c: &Case, reply: &Value) -> Result<(), String> {
    if let Some(err) = error_line(reply) {
        let code = err.split(' ').next().unwrap_or("");
        if code != "ERR" && code != "WRONGTYPE" {
            return Err(format!("error code {code}: {err}"));
        }
        if err.contains("internal error") || err.contains("refused") {
            return Err(format!("a module failure leaked out: {err}"));
        }
        if c.unsure {
            return Ok(());
        }
        // Arguments are checked in order, then the key's type, then the per-call cap.
        let want = match c.problems.first() {
            Some(first) => first.clone(),
            None if c.wrong_type => {
                "WRONGTYPE Operation against a key holding the wrong kind of value".to_string()
            }
            None if c.cost > MAX_ADD_PER_CALL => format!(
                "ERR cost {} would add more than {MAX_ADD_PER_CALL} members in one call",
                c.cost
            ),
            None => String::new(),
        };
        if err == want {
            return Ok(());
        }
        return Err(format!("error {err:?}, want {want:?}"));
    }
    let Some([allowed, count, remaining, retry, reset]) = five(reply) else {
        return Err(format!("not an error nor five integers: {reply:?}"));
    };
    if !c.unsure && (!c.problems.is_empty() || c.wrong_type) {
        return Err(format!(
            "accepted a call that had to fail ({:?})",
            c.problems
        ));
    }
    let sane = (allowed == 0 || allowed == 1)
        && count >= 0
        && remaining >= 0
        && retry >= -1
        && reset >= 0
        && (reset == 0) == (count == 0);
    if !sane {
        return Err(format!(
            "impossible reply {:?}",
            [allowed, count, remaining, retry, reset]
        ));
    }
    if let (Some(max), false) = (c.max, c.unsure) {
        let max = max as i64;
        let cost = c.cost as i64;
        if remaining != (max - count).max(0)
            || (retry == -1) != (cost > max)
            || (allowed == 1 && count < cost)
            || (allowed == 0 && cost <= max && count + cost <= max)
        {
            return Err(format!(
                "reply {:?} contradicts max {max} cost {cost}",
                [allowed, count, remaining, retry, reset]
            ));
        }
    }
    Ok(())
}

#[test]
fn fuzz_replies_are_errors_or_five_integers_and_touch_nothing_else() {
    for storage in STORAGES {
        let mut s = Server::builder().storage(storage).start();
        let mut con = s.client();
        let before = make_sentinels(&mut con);
        ok(&mut con, &["SET", "fz:str", "text"]);
        assert_eq!(
            q::<i64>(&mut con, &["HSET", "fz:hash", "f", "v"]),
            1,
            "HSET fz:hash"
        );
        let mut rng = Rng::new(0x5EED);
        let (mut errors, mut arrays) = (0, 0);
        for batch in 0..100 {
            let cases: Vec<Case> = (0..500).map(|_| case(&mut rng)).collect();
            let cmds: Vec<Vec<Vec<u8>>> = cases.iter().map(|c| c.args.clone()).collect();
            let replies = client::pipeline(&mut con, &cmds);
            for (c, r) in cases.iter().zip(&replies) {
                if let Err(why) = judge(c, r) {
                    let shown: Vec<String> = c
                        .args
                        .iter()
                        .map(|a| String::from_utf8_lossy(a).into_owned())
                        .collect();
                    panic!("batch {batch}: {shown:?}: {why}");
                }
                if error_line(r).is_some() {
                    errors += 1;
                } else {
                    arrays += 1;
                }
            }
        }
        assert!(
            errors > 15_000 && arrays > 15_000,
            "poor mix: {errors} errors, {arrays} arrays"
        );
        // Extremes: a 1 MiB key, and thousands of option words.
        let big_key = vec![b'k'; 1 << 20];
        let call_big: Vec<&[u8]> = vec![b"SLIDINGWINDOW.ALLOW", &big_key, b"10", b"5", b"1000"];
        assert_eq!(
            five(&harness::call_bytes(&mut con, &call_big)),
            Some([1, 1, 4, 0, 10_000])
        );
        let del = harness::call_bytes(&mut con, &[b"DEL", &big_key]);
        assert_eq!(del, Value::Int(1));
        let mut many = vec!["SLIDINGWINDOW.PEEK", "fz:0", "10", "5", "1000"];
        many.extend(std::iter::repeat_n("COST", 10_001));
        let v = call(&mut con, &many);
        assert_eq!(
            error_line(&v).as_deref(),
            Some(BAD_COST),
            "10,001 COST words"
        );
        many.truncate(5);
        many.extend(["COST", "1"].repeat(5000));
        let v = call(&mut con, &many);
        assert_eq!(
            error_line(&v).as_deref(),
            Some("ERR syntax error, option 'COST' given twice"),
            "COST given 5,000 times"
        );

        assert!(s.is_running(), "the server died");
        let pong: String = q(&mut s.client(), &["PING"]);
        assert_eq!(pong, "PONG");
        assert_eq!(
            sentinel_state(&mut con),
            before,
            "the fuzz run changed another key"
        );
        let t: String = q(&mut con, &["TYPE", "fz:str"]);
        assert_eq!(t, "string");
        for i in 0..8 {
            let t: String = q(&mut con, &["TYPE", &format!("fz:{i}")]);
            let stored = if storage == "zset" {
                "zset"
            } else {
                "swcompact"
            };
            assert!(t == stored || t == "none", "fz:{i} became a {t}");
        }
    }
}
