# InferLedger: one process serving the UI, OTLP/HTTP ingest and the scrape scheduler.
FROM python:3.11.7-slim-bookworm
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /opt/inferledger
COPY pyproject.toml setup.py README.md ./
COPY inferledger ./inferledger
COPY app ./app
COPY ingest ./ingest
COPY models ./models
COPY sql ./sql
COPY assets ./assets
RUN pip install --no-cache-dir . && useradd --system --create-home inferledger \
    && mkdir -p /var/lib/inferledger && chown inferledger /var/lib/inferledger
USER inferledger
EXPOSE 8050
ENTRYPOINT ["inferledger"]
CMD ["serve", "--host", "0.0.0.0", "--db", "/var/lib/inferledger/inferledger.duckdb"]
