// swift-tools-version:6.0
// LiveRelay: control plane for Live Activity remote updates (see ../shared/SPEC.md).
// No Swift package can be fetched on the build machines, so every outside library is a
// Debian C library reached through a `systemLibrary` target (ARCHITECTURE.md).
import PackageDescription

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
        .target(name: "JSON"),
        .target(name: "Metrics"),
        .target(name: "Logging", dependencies: ["JSON"]),
        .target(name: "Postgres", dependencies: ["CLibPQ", "CShims", "Crypto"]),
        .target(name: "HTTPServer", dependencies: ["CMicroHTTPD", "CShims", "JSON", "Metrics"]),
        .target(name: "Crypto", dependencies: ["COpenSSL", "CArgon2", "CShims", "JSON"]),
        .target(name: "HTTP2", dependencies: ["CNGHTTP2", "COpenSSL", "CShims", "Crypto"]),

        // The product.
        .target(name: "LiveRelayCore", dependencies: ["JSON"]),
        .target(name: "LiveRelayStore", dependencies: ["LiveRelayCore", "Postgres", "Crypto", "JSON", "Logging"]),
        // The tenant console's static files (Sources/LiveRelayConsole/Assets), compiled into the
        // binary by the EmbedConsoleAssets build-tool plugin (docs/console.md).
        .executableTarget(name: "ConsoleEmbedder"),
        .plugin(name: "EmbedConsoleAssets", capability: .buildTool(), dependencies: ["ConsoleEmbedder"]),
        .target(name: "LiveRelayConsole", plugins: ["EmbedConsoleAssets"]),
        .target(
            name: "LiveRelayAPI",
            dependencies: ["LiveRelayCore", "LiveRelayStore", "HTTPServer", "Crypto", "JSON", "Postgres", "Logging", "Metrics", "LiveRelayConsole"]),
        .target(
            name: "Delivery", dependencies: ["LiveRelayCore", "LiveRelayStore", "HTTP2", "Crypto", "JSON", "Postgres", "Metrics", "Logging", "CCurl"]),
        .target(name: "LiveRelaySandbox", dependencies: ["HTTP2", "Crypto", "JSON", "HTTPServer", "Logging"]),
        .target(
            name: "LiveRelayApp",
            dependencies: [
                "LiveRelayCore", "LiveRelayStore", "LiveRelayAPI", "Delivery", "LiveRelaySandbox", "Postgres", "HTTPServer", "Crypto", "JSON",
                "Metrics", "Logging"
            ]),
        .executableTarget(name: "liverelay", dependencies: ["LiveRelayApp"]),

        // Tests: pure logic without I/O, integration against real PostgreSQL and real sockets.
        // The fixtures every suite shares (FixtureFailure, eventually, TestDatabase, child
        // processes, a blocking HTTP client) live in one target (CONTRIBUTING.md "Test").
        .target(name: "LiveRelayTestSupport", dependencies: ["Postgres"], path: "Tests/LiveRelayTestSupport"),
        .testTarget(name: "JSONTests", dependencies: ["LiveRelayTestSupport", "JSON"]),
        .testTarget(name: "PostgresTests", dependencies: ["LiveRelayTestSupport", "Postgres", "Crypto"]),
        .testTarget(name: "HTTPServerTests", dependencies: ["LiveRelayTestSupport", "HTTPServer", "JSON", "Metrics"]),
        .testTarget(name: "CryptoTests", dependencies: ["LiveRelayTestSupport", "Crypto", "JSON"]),
        .testTarget(name: "HTTP2Tests", dependencies: ["LiveRelayTestSupport", "HTTP2", "Crypto", "JSON"]),
        .testTarget(name: "LiveRelayCoreTests", dependencies: ["LiveRelayTestSupport", "LiveRelayCore", "JSON"]),
        .testTarget(
            name: "DeliveryTests",
            dependencies: [
                "LiveRelayTestSupport", "Delivery", "LiveRelaySandbox", "LiveRelayCore", "LiveRelayStore", "HTTP2", "Crypto", "JSON", "Postgres"
            ]),
        .testTarget(
            name: "CLITests",
            dependencies: [
                "LiveRelayTestSupport", "LiveRelayApp", "LiveRelayAPI", "LiveRelayStore", "LiveRelayCore", "Postgres", "HTTPServer", "Crypto", "JSON",
                "Metrics", "Logging"
            ]),
        .testTarget(
            name: "LiveRelayAPITests",
            dependencies: [
                "LiveRelayTestSupport", "LiveRelayApp", "LiveRelayAPI", "Delivery", "Metrics", "Logging", "LiveRelayStore", "LiveRelayCore",
                "Postgres", "HTTPServer", "Crypto", "JSON", "LiveRelayConsole"
            ]),
        .testTarget(
            name: "EndToEndTests",
            dependencies: [
                "LiveRelayTestSupport", "LiveRelayApp", "LiveRelayAPI", "LiveRelayStore", "LiveRelayCore", "LiveRelaySandbox", "Delivery", "Postgres",
                "HTTPServer", "HTTP2", "Crypto", "JSON", "Metrics", "Logging"
            ])
    ]
)
