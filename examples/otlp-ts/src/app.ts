// A RAG request traced with the OpenTelemetry GenAI semantic conventions, exported over
// OTLP/HTTP (protobuf) to `tracescore serve`. Nothing here knows about tracescore but one
// documented attribute (tracescore.ground_truth).
//
//   OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=http://127.0.0.1:4318/v1/traces \
//   OTEL_RESOURCE_ATTRIBUTES=service.name=ts-rag,service.version=1.2.0,deployment.environment.name=staging \
//   npm start -- "What battery capacity does the Cargo have?"
import { SpanStatusCode, trace, type Span } from "@opentelemetry/api";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-proto";
import { NodeSDK } from "@opentelemetry/sdk-node";

interface Doc { id: string; content: string; score: number }

const CORPUS: Doc[] = [
  { id: "battery", content: "The Commuter and the Trail ship with a 500 Wh battery, while the Cargo ships with a 750 Wh battery.", score: 0 },
  { id: "warranty", content: "The frame has a lifetime warranty for the original owner.", score: 0 },
  { id: "prices", content: "The Cargo costs 4,290 dollars.", score: 0 },
];

function text(role: string, content: string): object {
  return { role, parts: [{ type: "text", content }] };
}

// a keyword retriever: the documents sharing the most words with the question
function retrieve(question: string, k: number): Doc[] {
  const words = new Set(question.toLowerCase().match(/[a-z0-9]+/g) ?? []);
  return CORPUS.map((d) => ({ ...d, score: (d.content.toLowerCase().match(/[a-z0-9]+/g) ?? [])
      .filter((w) => words.has(w)).length }))
    .sort((a, b) => b.score - a.score).slice(0, k);
}

// a fake model: answers with the context sentence that mentions the question's last noun
function model(question: string, context: string): string {
  const words = question.toLowerCase().match(/[a-z0-9]+/g) ?? [];
  const sentences = context.split(/(?<=\.)\s+/);
  return sentences.find((s) => words.some((w) => w.length > 4 && s.toLowerCase().includes(w)))
    ?? "I don't have sufficient information.";
}

async function answer(question: string, groundTruth?: string): Promise<{ answer: string; contexts: string[] }> {
  const tracer = trace.getTracer("ts-rag-app", "1.0.0");
  return tracer.startActiveSpan("invoke_agent rag", async (root: Span) => {
    try {
      root.setAttributes({
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "rag",
        "gen_ai.conversation.id": "conversation-1",
        "gen_ai.input.messages": JSON.stringify([text("user", question)]),
      });
      if (groundTruth) root.setAttribute("tracescore.ground_truth", groundTruth);
      const docs = tracer.startActiveSpan("retrieval keyword", (span: Span) => {
        const found = retrieve(question, 2);
        span.setAttributes({
          "gen_ai.operation.name": "retrieval",
          "gen_ai.retrieval.query.text": question,
          "gen_ai.retrieval.documents": JSON.stringify(found),
        });
        span.end();
        return found;
      });
      const context = docs.map((d) => d.content).join("\n");
      const reply = tracer.startActiveSpan("chat fake-model", (span: Span) => {
        const prompt = [text("system", "Answer from the context only."),
          text("user", `Context:\n${context}\n\nQuestion: ${question}`)];
        const out = model(question, context);
        span.setAttributes({
          "gen_ai.operation.name": "chat",
          "gen_ai.request.model": "fake-model",
          "gen_ai.input.messages": JSON.stringify(prompt),
          "gen_ai.output.messages": JSON.stringify([text("assistant", out)]),
          "gen_ai.usage.input_tokens": prompt.length * 20,
          "gen_ai.usage.output_tokens": out.split(" ").length,
        });
        span.end();
        return out;
      });
      root.setAttribute("gen_ai.output.messages", JSON.stringify([text("assistant", reply)]));
      return { answer: reply, contexts: docs.map((d) => d.id) };
    } catch (err) {
      root.setStatus({ code: SpanStatusCode.ERROR, message: String(err) });
      throw err;
    } finally {
      root.end();
    }
  });
}

const sdk = new NodeSDK({ traceExporter: new OTLPTraceExporter() });
sdk.start();
const question = process.argv[2] ?? "What battery capacity does the Cargo have?";
const result = await answer(question, process.argv[3]);
await sdk.shutdown(); // flushes: every span is acknowledged by then
console.log(JSON.stringify({ question, ...result }));
