// SAP Cloud Integration (CPI) Groovy script step: asks Tollgate whether this message may go on.
//
// Put it in a Groovy Script step before the receiver call. It reads:
//   property TollgateUrl         e.g. https://tollgate.example.com (externalise it)
//   property TollgateMeteringId  e.g. ShipmentStatus:${header.SAP_Sender} (partner and document)
//   property TollgateLimit       records per 24 hours for this partner and document type
// and sets property TollgateVerdict to "forward" or "hold" (with TollgateRetryAfter, seconds).
// Route on it with a Router step: "hold" goes to a JMS queue (or the sender's retry) for
// TollgateRetryAfter seconds; "forward" goes on. Tollgate down or slow means "forward".
//
// The weight is the batch's record count: X12 transaction sets (ST) or EDIFACT messages (UNH).
// The request id is the message processing log id, so a retried message is not counted twice.
// CPI calls processData with its Message; the parameter is left untyped so the script also runs
// outside CPI (its test in the Tollgate repository passes a stand-in message).

// Short enough that a slow or dead Tollgate never holds up the flow: fail open after it.
@groovy.transform.Field final int TIMEOUT_MS = 2000

def processData(message) {
    def body = message.getBody(String) ?: ""
    def records = Math.max(1, (body =~ /(?m)(^|[~'\n])\s*(ST\*|UNH\+)/).size())
    def requestId = message.getHeaders().get("SAP_MessageProcessingLogID") ?:
        message.getProperty("SAP_MessageProcessingLogID") ?: UUID.randomUUID().toString()
    def verdict = "forward"
    def retryAfter = null
    try {
        def conn = new URL(message.getProperty("TollgateUrl").toString().replaceAll('/$', '') + "/v1/quota")
            .openConnection()
        conn.setConnectTimeout(TIMEOUT_MS)
        conn.setReadTimeout(TIMEOUT_MS)
        conn.setRequestProperty("metering-id", message.getProperty("TollgateMeteringId").toString())
        conn.setRequestProperty("quota-limit", message.getProperty("TollgateLimit").toString())
        conn.setRequestProperty("quota-interval", "24")
        conn.setRequestProperty("quota-timeunit", "hours")
        conn.setRequestProperty("message-weight", records.toString())
        conn.setRequestProperty("quota-request-id", requestId.toString())
        def status = conn.getResponseCode()
        if (status == 429) {
            verdict = "hold"
            retryAfter = (conn.getHeaderField("Retry-After") ?: "60") as Integer
        }
        // 200 forwards; any other status fails open.
    } catch (IOException e) {
        // Refused, timed out or reset: fail open.
        message.setProperty("TollgateFailOpen", e.toString())
    }
    message.setProperty("TollgateVerdict", verdict)
    message.setProperty("TollgateRecords", records)
    if (retryAfter != null) {
        message.setProperty("TollgateRetryAfter", retryAfter)
    }
    return message
}
