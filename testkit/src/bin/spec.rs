//! Prints the shared spec: `cargo run -p testkit --bin spec > spec/cases.json`, and with
//! `headers`, the header spec: `cargo run -p testkit --bin spec -- headers > spec/headers.json`; with `leases`, the lease
//! scenarios: `cargo run -p testkit --bin spec -- leases > spec/leases.json`.

fn main() {
    match std::env::args().nth(1).as_deref() {
        None => print!("{}", testkit::spec::render(&testkit::spec::cases())),
        Some("headers") => print!(
            "{}",
            testkit::spec_headers::render(&testkit::spec_headers::cases())
        ),
        Some("leases") => print!(
            "{}",
            testkit::spec_leases::render(&testkit::spec_leases::scenarios())
        ),
        Some(other) => {
            eprintln!("unknown argument {other:?}: none, headers or leases");
            std::process::exit(2);
        }
    }
}
