import LiveRelayApp

LiveRelayMain.run(CommandLine.arguments)
