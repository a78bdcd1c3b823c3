//! `refinery::embed_migrations!` reads `migrations/` at compile time, but
//! cargo does not know that: without this, a new migration file is silently
//! left out of the binaries until something else in this crate changes.
fn main() {
    println!("cargo:rerun-if-changed=../../migrations");
}
