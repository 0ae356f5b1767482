//! The `nfsim` command.
fn main() {
    println!("nfsim");
}
