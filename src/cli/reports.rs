//! What reads rather than runs: `toki report` (the delivery rows) and
//! `toki preview` (a schedule's occurrences, no backend).

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use toki_app::Toki;

use super::common::{config_with, Common};

// `toki report`: see `Command::Report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    #[command(flatten)]
    common: Common,
    /// Print one JSON object instead of the tables.
    #[arg(long)]
    json: bool,
    /// Also write the report as a self-contained HTML page with charts.
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
}

impl ReportArgs {
    pub async fn run(self, file: Option<&Path>) -> anyhow::Result<i32> {
        let toki = Toki::open(config_with(file, &self.common)?).await?;
        let report = toki_app::report::collect(&toki).await?;
        // One read for every output: the page and the JSON cannot disagree.
        if let Some(path) = &self.html {
            let page = toki_app::report_page::render(&report)?;
            std::fs::write(path, page).with_context(|| format!("writing {}", path.display()))?;
        }
        if self.json {
            println!("{}", serde_json::to_string(&report)?);
        } else {
            println!("{}", toki_app::report::render(&report));
        }
        Ok(0)
    }
}

// `toki preview`: see `Command::Preview`.
#[derive(Debug, Args)]
pub struct PreviewArgs {
    /// The schedule JSON (the body of PUT .../schedules/{id}); `-` reads stdin.
    #[arg(value_name = "FILE")]
    file: PathBuf,
    /// How many occurrences.
    #[arg(long, short = 'n', default_value_t = 10)]
    count: usize,
    /// From this instant (RFC 3339); default: now.
    #[arg(long, value_parser = parse_instant)]
    from: Option<toki_model::Instant>,
    #[arg(long)]
    json: bool,
}

impl PreviewArgs {
    pub fn run(self) -> anyhow::Result<i32> {
        let file = &self.file;
        let text = if file.as_os_str() == "-" {
            std::io::read_to_string(std::io::stdin()).context("reading stdin")?
        } else {
            std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?
        };
        let input: toki_model::input::ScheduleInput = serde_json::from_str(&text)
            .with_context(|| format!("{}: not a schedule body", file.display()))?;
        let from = self.from.unwrap_or_else(chrono::Utc::now);
        match toki_app::preview::preview(&input, from, self.count) {
            Ok(p) if self.json => println!("{}", serde_json::to_string_pretty(&p)?),
            Ok(p) => println!("{}", toki_app::preview::render(&p)),
            Err(e) => {
                eprintln!("toki preview: {e}");
                return Ok(2);
            }
        }
        Ok(0)
    }
}

fn parse_instant(s: &str) -> Result<toki_model::Instant, String> {
    chrono::DateTime::parse_from_rfc3339(s)
        .map(|t| t.to_utc())
        .map_err(|e| format!("{s:?} is not an RFC 3339 instant ({e})"))
}
