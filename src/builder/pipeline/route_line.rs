//! The Route line: said when known, while the build's stages run.

/// What the build changes for the user's torch (`select::plan`), as a line
/// to say: known, or still being looked for on another thread.
pub struct Route(std::sync::Mutex<RouteState>);

enum RouteState {
    Known(Option<String>),
    Looking(std::thread::JoinHandle<Option<String>>),
}

impl Route {
    pub fn known(line: Option<String>) -> Route {
        Route(std::sync::Mutex::new(RouteState::Known(line)))
    }

    /// The line a thread is working out.
    pub fn looking(look: std::thread::JoinHandle<Option<String>>) -> Route {
        Route(std::sync::Mutex::new(RouteState::Looking(look)))
    }

    /// Whether the line can be had without waiting.
    pub fn is_known(&self) -> bool {
        let state = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match &*state {
            RouteState::Known(_) => true,
            RouteState::Looking(look) => look.is_finished(),
        }
    }

    /// The line, once (then `None`: it is said once), waiting for the look
    /// if it still runs.
    pub fn take(&self) -> Option<String> {
        let mut state = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match std::mem::replace(&mut *state, RouteState::Known(None)) {
            RouteState::Known(line) => line,
            // A look that panicked says nothing: the line is information.
            RouteState::Looking(look) => look.join().ok().flatten(),
        }
    }
}
