// Shutdown signals for daemons: main() blocks SIGINT and SIGTERM before it starts any thread (so
// every thread inherits the mask and none is interrupted), then waits for one synchronously.
//
//   int main(int argc, char** argv) {
//     tandem::BlockShutdownSignals();
//     ... parse flags, create and start the server ...
//     int sig = tandem::WaitForShutdownSignal();   // returns SIGINT or SIGTERM
//     server->Shutdown(...);
//   }
#ifndef TANDEM_COMMON_SIGNALS_H_
#define TANDEM_COMMON_SIGNALS_H_

namespace tandem {

// Blocks SIGINT, SIGTERM in the calling thread (and the threads it creates afterwards), and
// ignores SIGPIPE so a peer closing a socket is an error value, not a process kill.
void BlockShutdownSignals();

// Waits until SIGINT or SIGTERM arrives and returns its number. BlockShutdownSignals() first.
int WaitForShutdownSignal();

// Sends SIGTERM to this process: lets a component (an admin endpoint, a fatal error handler)
// start the same orderly shutdown an operator's `kill` would.
void RequestShutdown();

}  // namespace tandem

#endif  // TANDEM_COMMON_SIGNALS_H_
