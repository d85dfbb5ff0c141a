// SAP Process Integration (PI/PO): asks Tollgate whether a message may go on. The static
// `check` method is what a user-defined function or an adapter module calls (Java 11+, no
// dependency); `main` runs it from the command line:
//
//   java TollgateCheck.java URL METERING_ID LIMIT RECORDS REQUEST_ID
//
// prints "forward", "hold SECONDS" (exit 3) or "forward (fail-open: …)".
//
// In an adapter module (the receiver channel's module chain), call `check` with the partner
// and interface as metering id, the record count as weight and the PI message id as request
// id; on "hold" throw a ModuleException (recoverable) so the messaging system retries the
// message later (its retry interval should be close to the Retry-After answered); on "forward"
// pass the message on. Tollgate down or slow means "forward".

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;

public final class TollgateCheck {
    /** Short enough that a slow or dead Tollgate never holds up the channel. */
    static final Duration TIMEOUT = Duration.ofSeconds(2);

    private static final HttpClient CLIENT =
        HttpClient.newBuilder().connectTimeout(TIMEOUT).build();

    /** "forward", "hold SECONDS", or "forward (fail-open: …)". */
    public static String check(String url, String meteringId, long limit, long records, String requestId) {
        HttpRequest req = HttpRequest.newBuilder(URI.create(url.replaceAll("/$", "") + "/v1/quota"))
            .timeout(TIMEOUT)
            .header("metering-id", meteringId)
            .header("quota-limit", Long.toString(limit))
            .header("quota-interval", "24")
            .header("quota-timeunit", "hours")
            .header("message-weight", Long.toString(records))
            .header("quota-request-id", requestId)
            .GET()
            .build();
        try {
            HttpResponse<Void> res = CLIENT.send(req, HttpResponse.BodyHandlers.discarding());
            if (res.statusCode() == 200) return "forward";
            if (res.statusCode() == 429) {
                return "hold " + res.headers().firstValue("retry-after").orElse("60");
            }
            return "forward (fail-open: status " + res.statusCode() + ")";
        } catch (java.io.IOException e) {
            return "forward (fail-open: " + e + ")";
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return "forward (fail-open: interrupted)";
        }
    }

    public static void main(String[] args) {
        if (args.length != 5) {
            System.err.println("usage: TollgateCheck URL METERING_ID LIMIT RECORDS REQUEST_ID");
            System.exit(2);
        }
        String verdict = check(args[0], args[1], Long.parseLong(args[2]), Long.parseLong(args[3]), args[4]);
        System.out.println(verdict);
        System.exit(verdict.startsWith("hold") ? 3 : 0);
    }
}
