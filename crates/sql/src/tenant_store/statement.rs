//! SQL statements built as text plus typed values, bound in one step: one
//! builder for both engines. Written with `$n` placeholders (Postgres); for
//! SQLite they become `?`, because SQLite takes `$n` for a *named* parameter
//! and looks each one up among the earlier names: quadratic in the number of
//! values, which made a 500-value claim statement cost more to parse than to run.

use std::fmt::Write;

use sqlx::{Arguments, Database, Encode, IntoArguments, Type};

/// A value to bind.
#[derive(Debug, Clone)]
pub(crate) enum Value {
    Int(i64),
    Text(String),
    MaybeText(Option<String>),
    Bool(bool),
}

impl From<i64> for Value {
    fn from(v: i64) -> Self {
        Value::Int(v)
    }
}
impl From<String> for Value {
    fn from(v: String) -> Self {
        Value::Text(v)
    }
}
impl From<&str> for Value {
    fn from(v: &str) -> Self {
        Value::Text(v.to_owned())
    }
}
impl From<Option<String>> for Value {
    fn from(v: Option<String>) -> Self {
        Value::MaybeText(v)
    }
}
impl From<bool> for Value {
    fn from(v: bool) -> Self {
        Value::Bool(v)
    }
}

/// SQL text and the values its placeholders stand for, in order.
#[derive(Debug, Default)]
pub(crate) struct Statement {
    pub sql: String,
    pub values: Vec<Value>,
}

impl Statement {
    pub fn new(sql: &str) -> Self {
        Statement {
            sql: sql.to_owned(),
            values: Vec::new(),
        }
    }

    pub fn push(&mut self, sql: &str) -> &mut Self {
        self.sql.push_str(sql);
        self
    }

    /// Appends a placeholder for `value`.
    pub fn bind(&mut self, value: impl Into<Value>) -> &mut Self {
        self.values.push(value.into());
        let _ = write!(self.sql, "${}", self.values.len());
        self
    }

    /// Appends `(a, b, ...)` for each row, comma-separated.
    pub fn tuples<T>(
        &mut self,
        rows: impl IntoIterator<Item = T>,
        mut row: impl FnMut(&mut Row<'_>, T),
    ) -> &mut Self {
        for (i, item) in rows.into_iter().enumerate() {
            self.sql.push_str(if i == 0 { "(" } else { ", (" });
            row(
                &mut Row {
                    statement: self,
                    first: true,
                },
                item,
            );
            self.sql.push(')');
        }
        self
    }

    /// `VALUES (..), (..)` for an INSERT.
    pub fn values<T>(
        &mut self,
        rows: impl IntoIterator<Item = T>,
        row: impl FnMut(&mut Row<'_>, T),
    ) -> &mut Self {
        self.push(" VALUES ");
        self.tuples(rows, row)
    }

    /// `(v1, v2, ...)` for an IN list.
    pub fn list<T: Into<Value>>(&mut self, items: impl IntoIterator<Item = T>) -> &mut Self {
        self.sql.push('(');
        for (i, item) in items.into_iter().enumerate() {
            if i > 0 {
                self.sql.push_str(", ");
            }
            self.bind(item);
        }
        self.sql.push(')');
        self
    }
}

impl Statement {
    /// The statement as an sqlx query (its values move into the arguments).
    pub fn query<'q, DB>(&'q mut self) -> sqlx::query::Query<'q, DB, DB::Arguments<'q>>
    where
        DB: Database,
        DB::Arguments<'q>: IntoArguments<'q, DB>,
        i64: Encode<'q, DB> + Type<DB>,
        String: Encode<'q, DB> + Type<DB>,
        Option<String>: Encode<'q, DB> + Type<DB>,
        bool: Encode<'q, DB> + Type<DB>,
    {
        let values = std::mem::take(&mut self.values);
        self.for_engine::<DB>();
        sqlx::query_with(&self.sql, arguments::<DB>(values))
    }

    /// Placeholders as the engine parses them fastest.
    fn for_engine<DB: Database>(&mut self) {
        if DB::NAME == "SQLite" {
            self.sql = positional(&self.sql);
        }
    }

    /// The statement as an sqlx query whose rows are `R`.
    pub fn query_as<'q, DB, R>(&'q mut self) -> sqlx::query::QueryAs<'q, DB, R, DB::Arguments<'q>>
    where
        DB: Database,
        DB::Arguments<'q>: IntoArguments<'q, DB>,
        R: for<'r> sqlx::FromRow<'r, DB::Row>,
        i64: Encode<'q, DB> + Type<DB>,
        String: Encode<'q, DB> + Type<DB>,
        Option<String>: Encode<'q, DB> + Type<DB>,
        bool: Encode<'q, DB> + Type<DB>,
    {
        let values = std::mem::take(&mut self.values);
        self.for_engine::<DB>();
        sqlx::query_as_with(&self.sql, arguments::<DB>(values))
    }
}

/// `$1`, `$2`, … as `?`, `?`, … (they are numbered in binding order, each
/// used once); text inside single quotes is left alone.
fn positional(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut chars = sql.chars().peekable();
    let mut quoted = false;
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                quoted = !quoted;
                out.push(c);
            }
            '$' if !quoted && chars.peek().is_some_and(char::is_ascii_digit) => {
                while chars.next_if(char::is_ascii_digit).is_some() {}
                out.push('?');
            }
            _ => out.push(c),
        }
    }
    out
}

/// One parenthesised row of placeholders.
pub(crate) struct Row<'s> {
    statement: &'s mut Statement,
    first: bool,
}

impl Row<'_> {
    pub fn bind(&mut self, value: impl Into<Value>) -> &mut Self {
        if !self.first {
            self.statement.sql.push_str(", ");
        }
        self.first = false;
        self.statement.bind(value);
        self
    }
}

/// The engine's arguments for `values`.
pub(crate) fn arguments<'q, DB>(values: Vec<Value>) -> DB::Arguments<'q>
where
    DB: Database,
    i64: Encode<'q, DB> + Type<DB>,
    String: Encode<'q, DB> + Type<DB>,
    Option<String>: Encode<'q, DB> + Type<DB>,
    bool: Encode<'q, DB> + Type<DB>,
{
    let mut args = DB::Arguments::default();
    args.reserve(values.len(), values.len() * 16);
    for v in values {
        // Encoding these plain types into a fresh argument buffer cannot fail.
        let added = match v {
            Value::Int(i) => args.add(i),
            Value::Text(s) => args.add(s),
            Value::MaybeText(s) => args.add(s),
            Value::Bool(b) => args.add(b),
        };
        debug_assert!(added.is_ok());
    }
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_numbered_in_binding_order() {
        let mut s = Statement::new("INSERT INTO t (a, b)");
        s.values([(1_i64, "x"), (2, "y")], |r, (a, b)| {
            r.bind(a).bind(b);
        });
        s.push(" WHERE c IN ").list(["p", "q"]);
        assert_eq!(
            s.sql,
            "INSERT INTO t (a, b) VALUES ($1, $2), ($3, $4) WHERE c IN ($5, $6)"
        );
        assert_eq!(s.values.len(), 6);
    }

    #[test]
    fn sqlite_gets_positional_placeholders() {
        assert_eq!(
            positional("SELECT '$1', x FROM t WHERE a = $1 AND b IN ($2, $10)"),
            "SELECT '$1', x FROM t WHERE a = ? AND b IN (?, ?)"
        );
    }
}
