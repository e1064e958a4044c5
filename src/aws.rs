//! The AWS backend family (wired in once toki-aws lands).

use crate::app::Toki;
use crate::config::Config;

pub async fn open(_config: Config) -> anyhow::Result<Toki> {
    anyhow::bail!("backend aws: not wired yet")
}
