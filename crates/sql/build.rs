//! Lists migrations/ for `row::files`: each file's version, description and
//! SQL (include_str!), in version order, as sqlx's `migrate!` reads them.

use std::fmt::Write as _;
use std::path::Path;

fn main() {
    let root = Path::new(&std::env::var("CARGO_MANIFEST_DIR").unwrap()).join("../../migrations");
    println!("cargo:rerun-if-changed={}", root.display());
    let mut out = String::new();
    for (name, dir) in [("CONTROL", "control"), ("TENANT", "tenant")] {
        let dir = root.join(dir);
        println!("cargo:rerun-if-changed={}", dir.display());
        let mut files: Vec<(i64, String, String)> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|entry| entry.unwrap().path())
            .filter_map(|path| {
                let file = path.file_name()?.to_str()?.to_owned();
                let (version, rest) = file.split_once('_')?;
                let description = rest.strip_suffix(".sql")?;
                assert!(
                    !description.ends_with(".up") && !description.ends_with(".down"),
                    "{file}: reversible migrations are not used"
                );
                let version = version
                    .parse()
                    .unwrap_or_else(|_| panic!("{file}: no version"));
                Some((
                    version,
                    description.replace('_', " "),
                    path.display().to_string(),
                ))
            })
            .collect();
        files.sort();
        writeln!(out, "pub(crate) const {name}: &[super::MigrationFile] = &[").unwrap();
        for (version, description, path) in files {
            println!("cargo:rerun-if-changed={path}");
            writeln!(
                out,
                "    ({version}, {description:?}, include_str!({path:?})),"
            )
            .unwrap();
        }
        writeln!(out, "];").unwrap();
    }
    let dest = Path::new(&std::env::var("OUT_DIR").unwrap()).join("migrations.rs");
    std::fs::write(dest, out).unwrap();
}
