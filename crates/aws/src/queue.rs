//! The delay queue on SQS: per-message DelaySeconds (≤ 900 s), string message
//! attributes, visibility timeouts, receive counts and a dead-letter queue
//! (the queue's RedrivePolicy).

use std::collections::HashMap;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_sqs::types::{
    DeleteMessageBatchRequestEntry, MessageAttributeValue, MessageSystemAttributeName,
    QueueAttributeName, SendMessageBatchRequestEntry,
};
use aws_sdk_sqs::Client;
use toki_model::time::MAX_DELAY;
use toki_model::ValidationError;
use toki_ports::message::Attributes;
use toki_ports::StoreResult;
use toki_ports::{
    with_dead_letter_reason, with_renewal_reason, AbandonedPoll, BatchSent, DelayQueue,
    OutgoingMessage, QueueDepth, ReceivedMessage, RefusedMessage, DEAD_LETTER_REASON,
};
use tokio::sync::OnceCell;

use crate::error::{code_of, sdk, AwsError};

/// SQS's longest long poll.
const MAX_WAIT_S: u64 = 20;
/// SQS's longest visibility timeout (12 hours).
const MAX_VISIBILITY_S: u64 = 43_200;
/// SQS's batch limit.
const MAX_BATCH: usize = 10;
/// Visibility batches the heartbeat sends at once (5,000 held messages are
/// 500 batches: one after another they outlasted the heartbeat's margin).
const HEARTBEAT_BATCHES_AT_ONCE: usize = 16;

pub struct SqsDelayQueue {
    client: Client,
    queue_url: String,
    /// The queue's RedrivePolicy, read once (None: the queue has none).
    redrive: OnceCell<Option<Redrive>>,
}

/// Where the queue moves a message after too many receives, and after how many.
#[derive(Debug, Clone)]
struct Redrive {
    dead_letter_url: String,
    max_receive_count: u32,
}

impl SqsDelayQueue {
    pub fn new(client: Client, queue_url: impl Into<String>) -> Self {
        Self {
            client,
            queue_url: queue_url.into(),
            redrive: OnceCell::new(),
        }
    }

    pub fn queue_url(&self) -> &str {
        &self.queue_url
    }

    /// The dead-letter queue's URL, if the queue has a RedrivePolicy.
    pub async fn dead_letter_queue_url(&self) -> Result<Option<String>, AwsError> {
        Ok(self.redrive().await?.map(|r| r.dead_letter_url))
    }

    async fn redrive(&self) -> Result<Option<Redrive>, AwsError> {
        self.redrive
            .get_or_try_init(|| async {
                let resp = self
                    .client
                    .get_queue_attributes()
                    .queue_url(&self.queue_url)
                    .attribute_names(QueueAttributeName::RedrivePolicy)
                    .send()
                    .await
                    .map_err(|e| sdk("GetQueueAttributes", e))?;
                let Some(policy) = resp
                    .attributes()
                    .and_then(|a| a.get(&QueueAttributeName::RedrivePolicy))
                else {
                    return Ok(None);
                };
                let policy = redrive_policy(policy)?;
                let (account, name) = queue_of_arn(&policy.dead_letter_arn)?;
                let url = self
                    .client
                    .get_queue_url()
                    .queue_name(name)
                    .queue_owner_aws_account_id(account)
                    .send()
                    .await
                    .map_err(|e| sdk("GetQueueUrl(dead-letter queue)", e))?
                    .queue_url
                    .ok_or_else(|| AwsError::service("GetQueueUrl", "no QueueUrl in the answer"))?;
                Ok(Some(Redrive {
                    dead_letter_url: url,
                    max_receive_count: policy.max_receive_count,
                }))
            })
            .await
            .cloned()
    }

    /// Visible + in flight + delayed messages of one queue.
    /// Every message of `url`: visible + in flight + delayed.
    async fn count(&self, url: &str) -> Result<u64, AwsError> {
        Ok(self.counts(url).await?.iter().sum())
    }

    /// Visible, in flight (not visible) and delayed messages of `url` (SQS's approximations).
    async fn counts(&self, url: &str) -> Result<[u64; 3], AwsError> {
        let resp = self
            .client
            .get_queue_attributes()
            .queue_url(url)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesDelayed)
            .send()
            .await
            .map_err(|e| sdk("GetQueueAttributes", e))?;
        let mut counts = [0u64; 3];
        if let Some(attrs) = resp.attributes() {
            for (i, name) in [
                QueueAttributeName::ApproximateNumberOfMessages,
                QueueAttributeName::ApproximateNumberOfMessagesNotVisible,
                QueueAttributeName::ApproximateNumberOfMessagesDelayed,
            ]
            .into_iter()
            .enumerate()
            {
                if let Some(v) = attrs.get(&name) {
                    counts[i] = v.parse::<u64>().map_err(|_| {
                        AwsError::service(
                            "GetQueueAttributes",
                            format!("{name}: {v:?} is not a count"),
                        )
                    })?;
                }
            }
        }
        Ok(counts)
    }

    /// One ChangeMessageVisibilityBatch of at most 10 receipts.
    async fn extend_chunk(&self, chunk: &[String], timeout: Duration) -> StoreResult<()> {
        use aws_sdk_sqs::types::ChangeMessageVisibilityBatchRequestEntry;
        let entries = chunk
            .iter()
            .enumerate()
            .map(|(i, r)| {
                ChangeMessageVisibilityBatchRequestEntry::builder()
                    .id(i.to_string())
                    .receipt_handle(r)
                    .visibility_timeout(ceil_secs(timeout, MAX_VISIBILITY_S))
                    .build()
                    .map_err(|e| AwsError::service("ChangeMessageVisibilityBatch", e.to_string()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let out = self
            .client
            .change_message_visibility_batch()
            .queue_url(&self.queue_url)
            .set_entries(Some(entries))
            .send()
            .await
            .map_err(|e| sdk("ChangeMessageVisibilityBatch", e))?;
        // A message no longer in flight, or deleted since, has nothing left
        // to hide (the heartbeat may race an ack). SQS says so as
        // MessageNotInflight, ReceiptHandleIsInvalid, or InvalidParameterValue
        // "Message does not exist or is not available ..." (LocalStack too).
        let gone = |f: &aws_sdk_sqs::types::BatchResultErrorEntry| {
            f.code().contains("MessageNotInflight")
                || f.code().contains("ReceiptHandleIsInvalid")
                || (f.code().contains("InvalidParameterValue")
                    && f.message()
                        .is_some_and(|m| m.contains("does not exist or is not available")))
        };
        if let Some(f) = out.failed().iter().find(|f| !gone(f)) {
            return Err(AwsError::service(
                "ChangeMessageVisibilityBatch",
                format!("{}: {}", f.code(), f.message().unwrap_or_default()),
            )
            .into());
        }
        Ok(())
    }
}

/// ReceiveMessage on `url`: attributes, receive counts.
async fn receive_from(
    client: &Client,
    url: &str,
    max: usize,
    wait: Duration,
    visibility: Duration,
) -> Result<Vec<ReceivedMessage>, AwsError> {
    let resp = client
        .receive_message()
        .queue_url(url)
        .max_number_of_messages(max as i32)
        .wait_time_seconds(ceil_secs(wait, MAX_WAIT_S))
        .visibility_timeout(ceil_secs(visibility, MAX_VISIBILITY_S))
        .message_attribute_names("All")
        .message_system_attribute_names(MessageSystemAttributeName::ApproximateReceiveCount)
        .send()
        .await
        .map_err(|e| sdk("ReceiveMessage", e))?;
    let mut out = Vec::new();
    for m in resp.messages.unwrap_or_default() {
        let receipt = m.receipt_handle.ok_or_else(|| {
            AwsError::service("ReceiveMessage", "a message without a receipt handle")
        })?;
        let receive_count = m
            .attributes
            .as_ref()
            .and_then(|a| a.get(&MessageSystemAttributeName::ApproximateReceiveCount))
            .and_then(|v| v.parse().ok())
            .unwrap_or(1);
        let attributes: Attributes = m
            .message_attributes
            .unwrap_or_default()
            .into_iter()
            .filter_map(|(k, v)| v.string_value.map(|s| (k, s)))
            .collect();
        out.push(ReceivedMessage {
            receipt,
            body: m.body.unwrap_or_default(),
            attributes,
            receive_count,
        });
    }
    Ok(out)
}

/// DeleteMessageBatch on `url`, in chunks of 10.
async fn delete_from(client: &Client, url: &str, receipts: &[String]) -> StoreResult<()> {
    for chunk in receipts.chunks(MAX_BATCH) {
        let entries = chunk
            .iter()
            .enumerate()
            .map(|(i, r)| {
                DeleteMessageBatchRequestEntry::builder()
                    .id(format!("d{i}"))
                    .receipt_handle(r)
                    .build()
                    .map_err(|e| AwsError::service("DeleteMessageBatch", e.to_string()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let resp = client
            .delete_message_batch()
            .queue_url(url)
            .set_entries(Some(entries))
            .send()
            .await
            .map_err(|e| sdk("DeleteMessageBatch", e))?;
        let failed = resp.failed();
        if failed.is_empty() {
            continue;
        }
        let index: HashMap<String, usize> =
            (0..chunk.len()).map(|i| (format!("d{i}"), i)).collect();
        let detail: Vec<String> = failed
            .iter()
            .map(|f| {
                let which = index
                    .get(f.id())
                    .map_or_else(|| f.id().to_owned(), |i| format!("receipt #{i}"));
                format!(
                    "{which}: {}{}",
                    f.code(),
                    f.message().map(|m| format!(" ({m})")).unwrap_or_default()
                )
            })
            .collect();
        let message = format!("{} deletes failed: {}", failed.len(), detail.join("; "));
        if failed
            .iter()
            .all(|f| f.code().contains("ReceiptHandleIsInvalid"))
        {
            return Err(ValidationError::new("receipts", message).into());
        }
        return Err(if failed.iter().all(|f| !f.sender_fault()) {
            AwsError::Unavailable {
                operation: "DeleteMessageBatch",
                message,
            }
        } else {
            AwsError::service("DeleteMessageBatch", message)
        }
        .into());
    }
    Ok(())
}

/// A RedrivePolicy (JSON) as SQS gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RedrivePolicy {
    pub dead_letter_arn: String,
    pub max_receive_count: u32,
}

/// `deadLetterTargetArn` and `maxReceiveCount` (a number or a string of one)
/// of a RedrivePolicy.
pub(crate) fn redrive_policy(policy: &str) -> Result<RedrivePolicy, AwsError> {
    let bad = |why: &str| AwsError::service("RedrivePolicy", format!("{why} in {policy:?}"));
    let v: serde_json::Value = serde_json::from_str(policy)
        .map_err(|e| AwsError::service("RedrivePolicy", format!("{policy:?}: {e}")))?;
    let dead_letter_arn = v
        .get("deadLetterTargetArn")
        .and_then(|a| a.as_str())
        .map(str::to_owned)
        .ok_or_else(|| bad("no deadLetterTargetArn"))?;
    let max_receive_count = match v.get("maxReceiveCount") {
        Some(serde_json::Value::Number(n)) => n.as_u64(),
        Some(serde_json::Value::String(s)) => s.parse().ok(),
        _ => None,
    }
    .and_then(|n| u32::try_from(n).ok())
    .ok_or_else(|| bad("no maxReceiveCount"))?;
    Ok(RedrivePolicy {
        dead_letter_arn,
        max_receive_count,
    })
}

/// `arn:aws:sqs:<region>:<account>:<name>` → (account, name).
pub(crate) fn queue_of_arn(arn: &str) -> Result<(String, String), AwsError> {
    let parts: Vec<&str> = arn.split(':').collect();
    match parts.as_slice() {
        [_, _, "sqs", _, account, name] if !name.is_empty() => {
            Ok(((*account).to_owned(), (*name).to_owned()))
        }
        _ => Err(AwsError::service(
            "RedrivePolicy",
            format!("{arn:?} is not an SQS queue ARN"),
        )),
    }
}

/// Batch entries for `messages`: ids are positions, so callers' ids need not
/// fit SQS's id alphabet and refusals map back by position.
fn entries(messages: &[OutgoingMessage]) -> Result<Vec<SendMessageBatchRequestEntry>, AwsError> {
    messages
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let mut entry = SendMessageBatchRequestEntry::builder()
                .id(format!("m{i}"))
                .message_body(&m.body)
                .delay_seconds(ceil_secs(m.delay, MAX_DELAY.as_secs()));
            for (name, value) in &m.attributes {
                entry = entry.message_attributes(name, string_attribute(value)?);
            }
            // Standard queues accept a group (SQS fair queues): one tenant's
            // burst does not delay the others'.
            if let Some(group) = &m.group {
                entry = entry.message_group_id(group);
            }
            entry
                .build()
                .map_err(|e| AwsError::service("SendMessageBatch", e.to_string()))
        })
        .collect()
}

/// Whole seconds, rounded up, capped.
fn ceil_secs(d: Duration, cap: u64) -> i32 {
    let s = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    s.min(cap) as i32
}

fn string_attribute(value: &str) -> Result<MessageAttributeValue, AwsError> {
    MessageAttributeValue::builder()
        .data_type("String")
        .string_value(value)
        .build()
        .map_err(|e| AwsError::service("SendMessageBatch", e.to_string()))
}

/// SendMessageBatch to `url`: the messages SQS refused, by position.
async fn send_batch_to(
    client: &Client,
    url: &str,
    messages: &[OutgoingMessage],
) -> StoreResult<BatchSent> {
    toki_ports::check_batch(messages)?;
    if messages.is_empty() {
        return Ok(BatchSent::default());
    }
    let resp = client
        .send_message_batch()
        .queue_url(url)
        .set_entries(Some(entries(messages)?))
        .send()
        .await
        .map_err(|e| sdk("SendMessageBatch", e))?;
    // Entries SQS refused come back by id (their position); the others are sent.
    let refused = resp
        .failed()
        .iter()
        .map(|f| {
            let index = f
                .id()
                .strip_prefix('m')
                .and_then(|i| i.parse::<usize>().ok())
                .filter(|i| *i < messages.len())
                .ok_or_else(|| {
                    AwsError::service(
                        "SendMessageBatch",
                        format!("a failed entry with an unknown id {:?}", f.id()),
                    )
                })?;
            Ok(RefusedMessage {
                index,
                reason: format!(
                    "{}{}{}",
                    f.code(),
                    f.message().map(|m| format!(" ({m})")).unwrap_or_default(),
                    if f.sender_fault() {
                        ", sender fault"
                    } else {
                        ""
                    }
                ),
            })
        })
        .collect::<Result<Vec<_>, AwsError>>()?;
    Ok(BatchSent { refused })
}

#[async_trait]
impl DelayQueue for SqsDelayQueue {
    fn abandoned_poll(&self) -> AbandonedPoll {
        AbandonedPoll::StaysOpen
    }

    async fn send_batch(&self, messages: &[OutgoingMessage]) -> StoreResult<BatchSent> {
        send_batch_to(&self.client, &self.queue_url, messages).await
    }

    async fn dead_letter(&self, message: &ReceivedMessage, reason: &str) -> StoreResult<()> {
        let Some(dlq) = self.dead_letter_queue_url().await? else {
            return Err(AwsError::service(
                "dead-letter",
                format!(
                    "queue {} has no dead-letter queue (RedrivePolicy)",
                    self.queue_url
                ),
            )
            .into());
        };
        let letter = OutgoingMessage {
            id: "0".into(),
            body: message.body.clone(),
            attributes: with_dead_letter_reason(&message.attributes, reason),
            delay: Duration::ZERO,
            group: None,
        };
        let sent = send_batch_to(&self.client, &dlq, std::slice::from_ref(&letter)).await?;
        if let Some(r) = sent.refused.first() {
            return Err(
                AwsError::service("SendMessageBatch(dead-letter queue)", r.reason.clone()).into(),
            );
        }
        // In the dead-letter queue now: only then does it leave the queue.
        delete_from(
            &self.client,
            &self.queue_url,
            std::slice::from_ref(&message.receipt),
        )
        .await
    }

    async fn receive_limit(&self) -> StoreResult<Option<u32>> {
        Ok(self.redrive().await?.map(|r| r.max_receive_count))
    }

    async fn renew(
        &self,
        message: &ReceivedMessage,
        delay: Duration,
        why: &str,
    ) -> StoreResult<()> {
        // A copy with the receive count starting over (SQS's delay is at most
        // 15 minutes: a longer wait comes back and waits again), then the
        // original deleted; a crash between leaves both, which the claims
        // already make harmless (at-least-once).
        let copy = OutgoingMessage {
            id: "0".into(),
            body: message.body.clone(),
            attributes: with_renewal_reason(&message.attributes, why),
            delay: delay.min(MAX_DELAY),
            group: None,
        };
        let sent =
            send_batch_to(&self.client, &self.queue_url, std::slice::from_ref(&copy)).await?;
        if let Some(r) = sent.refused.first() {
            return Err(AwsError::service("SendMessageBatch(renewal)", r.reason.clone()).into());
        }
        delete_from(
            &self.client,
            &self.queue_url,
            std::slice::from_ref(&message.receipt),
        )
        .await
    }

    async fn receive(
        &self,
        max: usize,
        wait: Duration,
        visibility: Duration,
    ) -> StoreResult<Vec<ReceivedMessage>> {
        if !(1..=MAX_BATCH).contains(&max) {
            return Err(ValidationError::new("max", format!("must be 1..=10, got {max}")).into());
        }
        Ok(receive_from(&self.client, &self.queue_url, max, wait, visibility).await?)
    }

    async fn delete_batch(&self, receipts: &[String]) -> StoreResult<()> {
        delete_from(&self.client, &self.queue_url, receipts).await
    }

    async fn extend_visibility(&self, receipts: &[String], timeout: Duration) -> StoreResult<()> {
        use futures::stream::{self, StreamExt, TryStreamExt};
        // Batches of 10 (SQS's limit), several at once: a heartbeat over
        // thousands of held messages must finish well inside its margin.
        let batches: Vec<_> = receipts
            .chunks(MAX_BATCH)
            .map(|chunk| self.extend_chunk(chunk, timeout))
            .collect();
        stream::iter(batches)
            .buffer_unordered(HEARTBEAT_BATCHES_AT_ONCE)
            .try_collect::<()>()
            .await
    }

    async fn change_visibility(&self, receipt: &str, timeout: Duration) -> StoreResult<()> {
        let res = self
            .client
            .change_message_visibility()
            .queue_url(&self.queue_url)
            .receipt_handle(receipt)
            .visibility_timeout(ceil_secs(timeout, MAX_VISIBILITY_S))
            .send()
            .await;
        match res {
            Ok(_) => Ok(()),
            // Already visible again or deleted: there is nothing left to hide
            // (the embedded queue ignores a stale receipt the same way).
            Err(e)
                if code_of(&e).is_some_and(|c| {
                    c == "AWS.SimpleQueueService.MessageNotInflight" || c == "MessageNotInflight"
                }) =>
            {
                Ok(())
            }
            // A receipt SQS does not know (malformed, or of a deleted message).
            Err(e) if code_of(&e).is_some_and(|c| c.contains("ReceiptHandleIsInvalid")) => {
                Err(ValidationError::new("receipt", sdk("ChangeMessageVisibility", e)).into())
            }
            Err(e) => Err(sdk("ChangeMessageVisibility", e).into()),
        }
    }

    async fn dead_letters(&self, max: usize, hold: Duration) -> StoreResult<Vec<ReceivedMessage>> {
        let Some(dlq) = self.dead_letter_queue_url().await? else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        // Receiving hides them from other readers for `hold`; empty answers end the look.
        while out.len() < max {
            let got = receive_from(
                &self.client,
                &dlq,
                (max - out.len()).min(MAX_BATCH),
                Duration::from_secs(1),
                hold,
            )
            .await?;
            if got.is_empty() {
                break;
            }
            out.extend(got);
        }
        Ok(out)
    }

    async fn redrive(&self, letters: &[ReceivedMessage]) -> StoreResult<usize> {
        let Some(dlq) = self.dead_letter_queue_url().await? else {
            return Ok(0);
        };
        let mut moved = 0;
        for chunk in letters.chunks(MAX_BATCH) {
            let messages: Vec<OutgoingMessage> = chunk
                .iter()
                .enumerate()
                .map(|(i, l)| OutgoingMessage {
                    id: i.to_string(),
                    body: l.body.clone(),
                    attributes: {
                        let mut a = l.attributes.clone();
                        a.remove(DEAD_LETTER_REASON);
                        a
                    },
                    delay: Duration::ZERO,
                    group: None,
                })
                .collect();
            let sent = self.send_batch(&messages).await?;
            // Only what reached the queue leaves the dead-letter queue.
            let receipts: Vec<String> = chunk
                .iter()
                .enumerate()
                .filter(|(i, _)| !sent.refused.iter().any(|r| r.index == *i))
                .map(|(_, l)| l.receipt.clone())
                .collect();
            delete_from(&self.client, &dlq, &receipts).await?;
            moved += receipts.len();
        }
        Ok(moved)
    }

    async fn release_dead_letters(&self, letters: &[ReceivedMessage]) -> StoreResult<()> {
        let Some(dlq) = self.dead_letter_queue_url().await? else {
            return Ok(());
        };
        for l in letters {
            self.client
                .change_message_visibility()
                .queue_url(&dlq)
                .receipt_handle(&l.receipt)
                .visibility_timeout(0)
                .send()
                .await
                .map_err(|e| sdk("ChangeMessageVisibility(dead-letter queue)", e))?;
        }
        Ok(())
    }

    async fn depth(&self) -> StoreResult<QueueDepth> {
        let [visible, in_flight, delayed] = self.counts(&self.queue_url).await?;
        let dead_letters = match self.dead_letter_queue_url().await? {
            Some(url) => self.count(&url).await?,
            None => 0,
        };
        Ok(QueueDepth {
            messages: visible + in_flight + delayed,
            dead_letters,
            visible,
            in_flight,
            delayed,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_delays_up_and_caps_them() {
        assert_eq!(ceil_secs(Duration::ZERO, 900), 0);
        assert_eq!(ceil_secs(Duration::from_millis(1), 900), 1);
        assert_eq!(ceil_secs(Duration::from_millis(5000), 900), 5);
        assert_eq!(ceil_secs(Duration::from_millis(5001), 900), 6);
        assert_eq!(ceil_secs(Duration::from_secs(1000), 900), 900);
    }

    #[test]
    fn finds_the_dead_letter_queue_in_the_redrive_policy() {
        let policy = redrive_policy(
            r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:123456789012:q-dlq","maxReceiveCount":"3"}"#,
        )
        .unwrap();
        assert_eq!(policy.max_receive_count, 3);
        let numeric = redrive_policy(
            r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:1:q-dlq","maxReceiveCount":100}"#,
        )
        .unwrap();
        assert_eq!(numeric.max_receive_count, 100);
        assert!(redrive_policy(r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:1:q"}"#).is_err());
        assert_eq!(
            queue_of_arn(&policy.dead_letter_arn).unwrap(),
            ("123456789012".to_owned(), "q-dlq".to_owned())
        );
        assert!(queue_of_arn("arn:aws:sns:us-east-1:1:x").is_err());
    }
}
