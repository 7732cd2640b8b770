//! Prints the shared spec: `cargo run -p testkit --bin spec > spec/cases.json`.

fn main() {
    print!("{}", testkit::spec::render(&testkit::spec::cases()));
}
