// swift-tools-version:6.0
// LiveRelay: control plane for Live Activity remote updates (see ../shared/SPEC.md).
// No Swift package can be fetched on the build machines, so every outside library is a
// Debian C library reached through a `systemLibrary` target (ARCHITECTURE.md).
import PackageDescription

// Release builds on Linux allocate through jemalloc (Debian libjemalloc-dev; docs/architecture.md
// "Memory allocator"): the product's executable and the test bundle the benches run. Debug
// builds (the test suite, ThreadSanitizer) keep glibc's malloc.
let jemalloc: [LinkerSetting] = [.linkedLibrary("jemalloc", .when(platforms: [.linux], configuration: .release))]

let package = Package(
    name: "LiveRelay",
    platforms: [.macOS(.v14)],
    products: [
        .executable(name: "liverelay", targets: ["liverelay"])
    ],
    targets: [
        // C libraries (Debian -dev packages).
        .systemLibrary(name: "CLibPQ", pkgConfig: "libpq", providers: [.apt(["libpq-dev"])]),
        .systemLibrary(name: "COpenSSL", pkgConfig: "openssl", providers: [.apt(["libssl-dev"])]),
        .systemLibrary(name: "CNGHTTP2", pkgConfig: "libnghttp2", providers: [.apt(["libnghttp2-dev"])]),
        .systemLibrary(name: "CArgon2", pkgConfig: "libargon2", providers: [.apt(["libargon2-dev"])]),
        .systemLibrary(name: "CMicroHTTPD", pkgConfig: "libmicrohttpd", providers: [.apt(["libmicrohttpd-dev"])]),
        .systemLibrary(name: "CCurl", pkgConfig: "libcurl", providers: [.apt(["libcurl4-openssl-dev"])]),
        // Wrappers for macros and variadic C calls Swift cannot import.
        .target(name: "CShims", dependencies: ["COpenSSL", "CMicroHTTPD", "CLibPQ"]),

        // Infrastructure (knows nothing of LiveRelay).
        // The lock every target shares state behind (pthread-based, visible to ThreadSanitizer).
        .target(name: "Locking"),
        .target(name: "JSON"),
        .target(name: "Metrics", dependencies: ["Locking"]),
        .target(name: "Logging", dependencies: ["JSON", "Locking"]),
        .target(name: "Postgres", dependencies: ["CLibPQ", "CShims", "Crypto"]),
        .target(name: "HTTPServer", dependencies: ["CMicroHTTPD", "CShims", "JSON", "Metrics", "Locking"]),
        .target(name: "Crypto", dependencies: ["COpenSSL", "CArgon2", "CShims", "JSON"]),
        .target(name: "HTTP2", dependencies: ["CNGHTTP2", "COpenSSL", "CShims", "Crypto", "Locking"]),

        // The product.
        .target(name: "LiveRelayCore", dependencies: ["JSON", "Locking"]),
        .target(name: "LiveRelayStore", dependencies: ["LiveRelayCore", "Postgres", "Crypto", "JSON", "Logging", "Locking"]),
        // The tenant console's static files (Sources/LiveRelayConsole/Assets), compiled into the
        // binary by the EmbedConsoleAssets build-tool plugin (docs/console.md).
        .executableTarget(name: "ConsoleEmbedder"),
        .plugin(name: "EmbedConsoleAssets", capability: .buildTool(), dependencies: ["ConsoleEmbedder"]),
        .target(name: "LiveRelayConsole", plugins: ["EmbedConsoleAssets"]),
        .target(
            name: "LiveRelayAPI",
            dependencies: [
                "LiveRelayCore", "LiveRelayStore", "HTTPServer", "Crypto", "JSON", "Postgres", "Logging", "Metrics", "LiveRelayConsole", "Locking"
            ]),
        .target(
            name: "Delivery",
            dependencies: ["LiveRelayCore", "LiveRelayStore", "HTTP2", "Crypto", "JSON", "Postgres", "Metrics", "Logging", "CCurl", "Locking"]),
        .target(name: "LiveRelaySandbox", dependencies: ["HTTP2", "Crypto", "JSON", "HTTPServer", "Logging", "Locking"]),
        .target(
            name: "LiveRelayApp",
            dependencies: [
                "LiveRelayCore", "LiveRelayStore", "LiveRelayAPI", "Delivery", "LiveRelaySandbox", "Postgres", "HTTPServer", "Crypto", "JSON",
                "Metrics", "Logging", "Locking"
            ]),
        .executableTarget(name: "liverelay", dependencies: ["LiveRelayApp"], linkerSettings: jemalloc),

        // Tests: pure logic without I/O, integration against real PostgreSQL and real sockets.
        // The fixtures every suite shares (FixtureFailure, eventually, TestDatabase, child
        // processes, a blocking HTTP client) live in one target (CONTRIBUTING.md "Test").
        .target(name: "LiveRelayTestSupport", dependencies: ["Postgres", "Locking"], path: "Tests/LiveRelayTestSupport", linkerSettings: jemalloc),
        .testTarget(name: "LockingTests", dependencies: ["LiveRelayTestSupport", "Locking"]),
        .testTarget(name: "JSONTests", dependencies: ["LiveRelayTestSupport", "JSON"]),
        .testTarget(name: "PostgresTests", dependencies: ["LiveRelayTestSupport", "Locking", "Postgres", "Crypto"]),
        .testTarget(name: "HTTPServerTests", dependencies: ["LiveRelayTestSupport", "Locking", "HTTPServer", "JSON", "Metrics"]),
        .testTarget(name: "CryptoTests", dependencies: ["LiveRelayTestSupport", "Crypto", "JSON"]),
        .testTarget(name: "HTTP2Tests", dependencies: ["LiveRelayTestSupport", "Locking", "HTTP2", "Crypto", "JSON"]),
        .testTarget(name: "LiveRelayCoreTests", dependencies: ["LiveRelayTestSupport", "LiveRelayCore", "JSON"]),
        .testTarget(name: "LiveRelayStoreTests", dependencies: ["LiveRelayTestSupport", "LiveRelayStore", "Postgres"]),
        .testTarget(
            name: "DeliveryTests",
            dependencies: [
                "LiveRelayTestSupport", "Locking", "Delivery", "LiveRelaySandbox", "LiveRelayCore", "LiveRelayStore", "HTTP2", "Crypto", "JSON",
                "Postgres"
            ]),
        .testTarget(
            name: "CLITests",
            dependencies: [
                "LiveRelayTestSupport", "Locking", "LiveRelayApp", "LiveRelayAPI", "LiveRelayStore", "LiveRelayCore", "Postgres", "HTTPServer",
                "Crypto", "JSON",
                "Metrics", "Logging"
            ]),
        .testTarget(
            name: "LiveRelayAPITests",
            dependencies: [
                "LiveRelayTestSupport", "Locking", "LiveRelayApp", "LiveRelayAPI", "Delivery", "Metrics", "Logging", "LiveRelayStore",
                "LiveRelayCore",
                "Postgres", "HTTPServer", "Crypto", "JSON", "LiveRelayConsole"
            ]),
        .testTarget(
            name: "EndToEndTests",
            dependencies: [
                "LiveRelayTestSupport", "Locking", "LiveRelayApp", "LiveRelayAPI", "LiveRelayStore", "LiveRelayCore", "LiveRelaySandbox", "Delivery",
                "Postgres",
                "HTTPServer", "HTTP2", "Crypto", "JSON", "Metrics", "Logging"
            ])
    ]
)
