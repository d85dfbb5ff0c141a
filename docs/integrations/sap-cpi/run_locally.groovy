// Runs TollgateCheck.groovy outside SAP CPI with a stand-in for CPI's Message, to try it on a
// laptop or in a test:
//
//   groovy run_locally.groovy URL METERING_ID LIMIT MESSAGE_ID < batch.edi
//
// prints the verdict ("forward", "hold SECONDS" with exit code 3, or "forward (fail-open: …)").

// CPI's Message has getProperty/setProperty for exchange properties, which in Groovy also
// answer `message.x`: so this stand-in is only used through its methods.
class StandInMessage {
    private final String body
    private final Map<String, Object> headers = [:]
    private final Map<String, Object> properties = [:]
    StandInMessage(String body) { this.body = body }
    def getBody(Class type) { body }
    Map<String, Object> getHeaders() { headers }
    def getProperty(String name) { properties[name] }
    void setProperty(String name, Object value) { properties[name] = value }
    void setHeader(String name, Object value) { headers[name] = value }
}

if (args.length != 4) {
    System.err.println("usage: groovy run_locally.groovy URL METERING_ID LIMIT MESSAGE_ID < batch.edi")
    System.exit(2)
}
def here = new File(getClass().protectionDomain.codeSource.location.path).parentFile
def step = new GroovyShell().parse(new File(here, "TollgateCheck.groovy"))
def message = new StandInMessage(System.in.text)
message.setHeader("SAP_MessageProcessingLogID", args[3])
message.setProperty("TollgateUrl", args[0])
message.setProperty("TollgateMeteringId", args[1])
message.setProperty("TollgateLimit", args[2])
step.processData(message)
if (message.getProperty("TollgateVerdict") == "hold") {
    println "hold ${message.getProperty("TollgateRetryAfter")}"
    System.exit(3)
}
def failOpen = message.getProperty("TollgateFailOpen")
println(failOpen ? "forward (fail-open: ${failOpen})" : "forward")
