//! Rows read by column name, and the migrations embedded in the binaries:
//! what sqlx's `#[derive(FromRow)]` and `migrate!` do, without its
//! proc-macro crate. That crate links sqlx's drivers, so a build compiled
//! them (and tokio, rustls) a second time for the host: about 50 s of a
//! cold build's CPU (docs/testing.md, "CI timings").

use std::borrow::Cow;

use sqlx::migrate::{Migration, MigrationType, Migrator};

/// A struct of named columns and its `sqlx::FromRow`, for any database
/// whose rows decode each field's type. A leading `#[flatten]` field is
/// read from the same row by its own `FromRow`.
macro_rules! row {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident {
            #[flatten] $flat_vis:vis $flat:ident : $flat_ty:ty,
            $($(#[$field_meta:meta])* $field_vis:vis $field:ident : $ty:ty),* $(,)?
        }
    ) => {
        $(#[$meta])*
        $vis struct $name {
            $flat_vis $flat: $flat_ty,
            $($(#[$field_meta])* $field_vis $field: $ty),*
        }
        $crate::row::row!(@from_row $name [$flat: $flat_ty] $($field: $ty),*);
    };
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident {
            $($(#[$field_meta:meta])* $field_vis:vis $field:ident : $ty:ty),* $(,)?
        }
    ) => {
        $(#[$meta])*
        $vis struct $name {
            $($(#[$field_meta])* $field_vis $field: $ty),*
        }
        $crate::row::row!(@from_row $name [] $($field: $ty),*);
    };
    (@from_row $name:ident [$($flat:ident : $flat_ty:ty)?] $($field:ident : $ty:ty),*) => {
        impl<'r, R: sqlx::Row> sqlx::FromRow<'r, R> for $name
        where
            &'r str: sqlx::ColumnIndex<R>,
            $($flat_ty: sqlx::FromRow<'r, R>,)?
            $($ty: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,)*
        {
            fn from_row(row: &'r R) -> Result<Self, sqlx::Error> {
                Ok(Self {
                    $($flat: <$flat_ty as sqlx::FromRow<'r, R>>::from_row(row)?,)?
                    $($field: row.try_get(stringify!($field))?),*
                })
            }
        }
    };
}
pub(crate) use row;

/// A migration file compiled in: its version, its description (the file
/// name's words) and its SQL.
pub(crate) type MigrationFile = (i64, &'static str, &'static str);

/// The migrations as `sqlx::migrate!` makes them: each checksummed over its
/// SQL, in a transaction unless it starts with `-- no-transaction`.
pub(crate) fn migrator(files: &'static [MigrationFile]) -> Migrator {
    let migrations = files
        .iter()
        .map(|&(version, description, sql)| {
            Migration::new(
                version,
                Cow::Borrowed(description),
                MigrationType::Simple,
                Cow::Borrowed(sql),
                sql.starts_with("-- no-transaction"),
            )
        })
        .collect();
    Migrator {
        migrations: Cow::Owned(migrations),
        ..Migrator::DEFAULT
    }
}

/// The files of `migrations/` (build.rs lists them).
pub(crate) mod files {
    include!(concat!(env!("OUT_DIR"), "/migrations.rs"));
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    /// The embedded migrations are the directory's, as sqlx reads them: same
    /// versions, descriptions and checksums (a database migrated by an older
    /// build is accepted by this one).
    #[tokio::test]
    async fn the_embedded_migrations_are_the_directorys() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../migrations");
        for (dir, files) in [("control", files::CONTROL), ("tenant", files::TENANT)] {
            let read = Migrator::new(root.join(dir)).await.unwrap();
            let embedded = migrator(files);
            let key = |m: &Migration| {
                (
                    m.version,
                    m.description.to_string(),
                    m.checksum.to_vec(),
                    m.no_tx,
                )
            };
            let want: Vec<_> = read.iter().map(key).collect();
            let got: Vec<_> = embedded.iter().map(key).collect();
            assert!(!want.is_empty(), "{dir}: no migrations read");
            assert_eq!(got, want, "{dir}");
        }
    }
}
