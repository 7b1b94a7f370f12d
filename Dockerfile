# ankusa container image: a Rust build stage, then a slim Debian runtime with the binary.
#   docker build -t ankusa .
#   docker run --rm ankusa --help
# The image runs `ankusa worker` by default; docker-compose.yml also runs it as the demo
# receiver and, with curl, as the demo producer. Only crates.io and Debian are fetched.
# Bases are named by tag: pin them by digest for production (`docker buildx imagetools
# inspect rust:1-slim-bookworm` prints it) as `FROM rust:1-slim-bookworm@sha256:<digest>`.
# Secrets (ANKUSA_ADMIN__TOKEN, ANKUSA_ADMIN__INGEST_TOKEN) are set at run time, never here.

FROM rust:1-slim-bookworm AS build
WORKDIR /src
# Dependencies first, in their own layer: a change under src/ does not rebuild them.
COPY Cargo.toml Cargo.lock ./
RUN mkdir src \
 && echo 'fn main() {}' > src/main.rs \
 && touch src/lib.rs \
 && cargo build --release --locked \
 && rm -rf src
COPY src ./src
COPY lua ./lua
COPY config ./config
# COPY keeps the context's mtimes, which may be older than the placeholder build above.
# The release profile splits debug info off the binary (target/release/ankusa.dwp); strip
# what is left of symbols so the image carries only the code.
RUN touch src/lib.rs src/main.rs \
 && cargo build --release --locked --bin ankusa \
 && strip --strip-debug -o /usr/local/bin/ankusa target/release/ankusa

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates curl \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin ankusa
COPY --from=build /usr/local/bin/ankusa /usr/local/bin/ankusa
COPY config/ankusa.toml /etc/ankusa/ankusa.toml.example
USER ankusa
# JSON logs for log collectors; `--log-format pretty` or ANKUSA_LOG_FORMAT=pretty for people.
ENV ANKUSA_LOG_FORMAT=json \
    ANKUSA_ADMIN__LISTEN=0.0.0.0:9187
EXPOSE 9187
# /healthz: the process runs, and as leader its scheduler makes progress (its self-check).
HEALTHCHECK --interval=10s --timeout=3s --start-period=15s --retries=3 \
  CMD ["curl", "-fsS", "-o", "/dev/null", "http://127.0.0.1:9187/healthz"]
ENTRYPOINT ["ankusa"]
CMD ["worker"]
