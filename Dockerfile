# ankusa container image: a Rust build stage, then a slim Debian runtime with the binary.
#   docker build -t ankusa .
#   docker run --rm ankusa --help
# The image runs `ankusa worker` by default; docker-compose.yml also runs it as the demo
# receiver and, with curl, as the demo producer. Only crates.io and Debian are fetched.

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
RUN touch src/lib.rs src/main.rs \
 && cargo build --release --locked --bin ankusa \
 && cp target/release/ankusa /usr/local/bin/ankusa

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
ENTRYPOINT ["ankusa"]
CMD ["worker"]
