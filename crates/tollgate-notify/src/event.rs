//! What a notification says: the [`EventKind`] and the JSON body ([`Event`]) sent to every
//! webhook that wants it.

use std::fmt;
use std::str::FromStr;

use serde::Serialize;

/// Which change a notification reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// A partner's held count rose from zero.
    PartnerHeld,
    /// A partner's held count fell back to zero.
    PartnerReleased,
    /// A partner's duplicate count grew after a quiet period.
    DuplicatesStarted,
    /// A partner's held units crossed the backlog threshold upward.
    BacklogExceeded,
    /// Sent on request (`POST /v1/notify/test`) to check a webhook.
    Test,
}

impl EventKind {
    /// The events the detector reports (every one but [`EventKind::Test`]), in the order a
    /// webhook's `events` lists them by default.
    pub const WATCHED: [EventKind; 4] = [
        EventKind::PartnerHeld,
        EventKind::PartnerReleased,
        EventKind::DuplicatesStarted,
        EventKind::BacklogExceeded,
    ];

    /// The name in the JSON body, the config and the metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::PartnerHeld => "partner_held",
            Self::PartnerReleased => "partner_released",
            Self::DuplicatesStarted => "duplicates_started",
            Self::BacklogExceeded => "backlog_exceeded",
            Self::Test => "test",
        }
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for EventKind {
    type Err = String;
    /// One of the watched events by name (`test` is not one a webhook chooses).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::WATCHED.into_iter().find(|k| k.as_str() == s).ok_or_else(|| {
            let names: Vec<&str> = Self::WATCHED.iter().map(|k| k.as_str()).collect();
            format!("expected one of {}", names.join(", "))
        })
    }
}

/// The JSON body of one notification.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Event {
    /// What happened.
    pub event: EventKind,
    /// The partner (its configured name, or the raw `QUAL:ID` of an unknown sender); `null`
    /// for a test.
    pub partner: Option<String>,
    /// The partner's metering id most concerned (see [`crate::Detector`]), when it has one.
    pub metering_id: Option<String>,
    /// When the change was seen (RFC 3339, UTC).
    pub at: jiff::Timestamp,
    /// The partner's held items at that time.
    pub held: u64,
    /// The partner's held units (the items' weights) at that time.
    pub held_units: u64,
    /// The partner's items quarantined as duplicates at that time.
    pub duplicates: u64,
}

impl Event {
    /// The `test` event sent at `at`.
    pub fn test(at: jiff::Timestamp) -> Self {
        Self {
            event: EventKind::Test,
            partner: None,
            metering_id: None,
            at,
            held: 0,
            held_units: 0,
            duplicates: 0,
        }
    }

    /// The body as sent (compact JSON).
    pub fn body(&self) -> Vec<u8> {
        // Strings, integers and a timestamp: serializing cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_the_body_has_every_field() {
        for k in EventKind::WATCHED {
            assert_eq!(k.as_str().parse::<EventKind>(), Ok(k));
        }
        let e = "held".parse::<EventKind>().unwrap_err();
        assert!(e.contains("partner_held, partner_released"), "{e}");
        assert!("test".parse::<EventKind>().is_err());
        let at: jiff::Timestamp = "2026-12-02T04:13:23Z".parse().unwrap();
        let body: serde_json::Value = serde_json::from_slice(&Event::test(at).body()).unwrap();
        assert_eq!(
            body,
            serde_json::json!({"event": "test", "partner": null, "metering_id": null,
                "at": "2026-12-02T04:13:23Z", "held": 0, "held_units": 0, "duplicates": 0})
        );
    }
}
