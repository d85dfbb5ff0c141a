//! The usage history's side of the tests: checks through `/v1/quota`, reads of `/v1/usage`
//! and their sums, and a server on a store of its own with a config file.

use std::path::Path;

use serde_json::Value;

use super::{RedisServer, Server, free_port};

/// One `GET` with optional extra header lines; the status and the body.
pub fn get(server: &Server, path: &str, headers: &str) -> (u16, String) {
    let m = server.request("GET", path, &super::header_pairs(headers), b"");
    (m.status, m.text())
}

/// One `/v1/quota` check of `weight` units against `limit` per day; the status.
pub fn quota(server: &Server, id: &str, limit: u64, weight: u64) -> u16 {
    let h = format!(
        "metering-id: {id}\r\nquota-limit: {limit}\r\nquota-timeunit: day\r\nmessage-weight: {weight}\r\n"
    );
    get(server, "/v1/quota", &h).0
}

/// `GET /v1/usage?metering_id=ID` as JSON (must be 200).
pub fn usage(server: &Server, id: &str, headers: &str) -> Value {
    let (status, body) = get(server, &format!("/v1/usage?metering_id={id}"), headers);
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

/// Admitted, refused, held and duplicate units over every bucket, after checking the
/// buckets' shape.
pub fn units(answer: &Value) -> [u64; 4] {
    assert_eq!(answer["bucket_seconds"], 300, "{answer}");
    let buckets = answer["buckets"].as_array().unwrap();
    let mut last = None;
    let mut sum = [0; 4];
    for b in buckets {
        let start: jiff::Timestamp = b["start"].as_str().unwrap().parse().unwrap();
        assert_eq!(start.as_second() % 300, 0, "aligned to 5 minutes: {answer}");
        assert!(last < Some(start), "ascending: {answer}");
        last = Some(start);
        let fields = ["admitted", "refused", "held", "duplicate"];
        let got = fields.map(|f| b[f].as_u64().unwrap_or_else(|| panic!("{f}: {answer}")));
        assert!(got.iter().sum::<u64>() > 0, "only buckets with data: {answer}");
        for (s, g) in sum.iter_mut().zip(got) {
            *s += g;
        }
    }
    sum
}

/// Admitted and refused units over every bucket (see [`units`]).
pub fn totals(answer: &Value) -> (u64, u64) {
    let [admitted, refused, ..] = units(answer);
    (admitted, refused)
}

/// Writes `text` into a config file of its own in `dir`; its path.
pub fn config(dir: &Path, text: &str) -> String {
    let f = dir.join(format!("c{}.toml", free_port()));
    std::fs::write(&f, text).unwrap();
    f.to_str().unwrap().to_owned()
}

/// `tollgate serve` on `store`, with `data` and the config file `config`.
pub fn serve(store: &str, data: &Path, config: &str) -> Server {
    Server::start(&["--store", store, "--data", data.to_str().unwrap(), "--config", config])
}

/// 5 + 5 admitted of 12; 5 over quota, 20 heavier than the limit: 10 admitted, 25 refused.
pub fn decide_on(server: &Server, id: &str) {
    assert_eq!(quota(server, id, 12, 5), 200);
    assert_eq!(quota(server, id, 12, 5), 200);
    assert_eq!(quota(server, id, 12, 5), 429);
    assert_eq!(quota(server, id, 12, 20), 429);
}

/// The sum of the fields of Redis hash `key` whose name ends in `kind` (`a`, `r`, `h`, `d`).
pub fn field_sum(redis: &RedisServer, key: &str, kind: &str) -> u64 {
    let script = "local s = 0 local t = redis.call('HGETALL', KEYS[1]) for i = 1, #t, 2 do \
                  if string.sub(t[i], -1) == ARGV[1] then s = s + tonumber(t[i + 1]) end \
                  end return s";
    let reply = redis.command(&format!("EVAL \"{script}\" 1 {key} {kind}")).unwrap();
    reply.trim_start_matches(':').parse().unwrap_or_else(|_| panic!("{reply}"))
}

/// The Redis hash holding `id`'s usage for today (UTC), under the default key prefix.
pub fn today_key(id: &str) -> String {
    let day = jiff::Timestamp::now().as_second().div_euclid(86_400);
    format!("tollgate:usage:{{{id}}}:{day}")
}
