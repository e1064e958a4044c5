// `sqlx::migrate!` reads migrations/ while compiling; without this, a new or
// edited migration is not seen until something else in the crate changes.
fn main() {
    println!("cargo:rerun-if-changed=../../migrations");
}
