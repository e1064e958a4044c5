//! `toki report`: delivery rows aggregated per tenant × channel × status.

use serde::Serialize;
use toki_core::ports::TenantStores;

use crate::table::table;
use crate::toki::Toki;

#[derive(Debug, Serialize)]
pub struct ReportRow {
    pub tenant: String,
    pub channel: String,
    pub status: String,
    pub count: u64,
}

pub async fn collect(toki: &Toki) -> anyhow::Result<Vec<ReportRow>> {
    let mut rows = Vec::new();
    for t in toki.directory.list().await? {
        let store = toki.stores.open(&t.id).await?;
        for c in store.delivery_counts().await? {
            rows.push(ReportRow {
                tenant: t.id.to_string(),
                channel: c.channel.to_string(),
                status: c.status.to_string(),
                count: c.count,
            });
        }
    }
    Ok(rows)
}

pub fn render(rows: &[ReportRow]) -> String {
    if rows.is_empty() {
        return "no deliveries recorded yet".into();
    }
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.tenant.clone(),
                r.channel.clone(),
                r.status.clone(),
                r.count.to_string(),
            ]
        })
        .collect();
    table(&["tenant", "channel", "status", "count"], &cells)
}
