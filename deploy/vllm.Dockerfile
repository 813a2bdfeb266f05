# vLLM's OpenAI server plus the OpenTelemetry packages it needs for --otlp-traces-endpoint
# (vLLM does not bundle them; see ../../shared/reference/vllm-observability.md section 2).
FROM vllm/vllm-openai:v0.33.0
RUN pip install --no-cache-dir \
    opentelemetry-sdk==1.45.2 \
    opentelemetry-api==1.45.2 \
    opentelemetry-exporter-otlp-proto-http==1.45.2 \
    opentelemetry-exporter-otlp-proto-grpc==1.45.2 \
    opentelemetry-semantic-conventions-ai==0.5.1
