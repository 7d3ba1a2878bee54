//! `POST /v1/model/rollback`, the one admin route: reinstate the previously accepted model.
//!
//! It changes what every consumer's scores mean, so it needs `Authorization: Bearer <token>`
//! with the token of `http.admin_token_file` / `http.admin_token_env`. Without a configured
//! token the route is off (403), never open. The presented token is compared in constant time
//! (no timing oracle on how many leading bytes matched) and neither token is ever logged.

use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::Json;
use serde_json::{json, Value};
use subtle::ConstantTimeEq;

use super::{ApiError, AppState, Shared};
use crate::engine::registry::RegistryError;
use crate::engine::store::StoreError;

pub(super) async fn rollback(
    State(state): State<Shared>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    authorize(&state, &headers)?;
    let (retired, active) = state.registry.rollback().map_err(|e| match e {
        RegistryError::NoModel => ApiError::new(
            StatusCode::CONFLICT,
            "no model is active; there is nothing to roll back",
        ),
        RegistryError::NoPrevious { active } => {
            ApiError::new(StatusCode::CONFLICT, e.to_string()).with("active", active)
        }
    })?;
    let (old, new) = (retired.meta.version, active.meta.version);
    state.metrics.rollbacks.inc();
    active.publish(&state.metrics);
    tracing::info!(retired = old, active = new, "model rolled back");
    if let Some(store) = state.store.clone() {
        let outcome = tokio::task::spawn_blocking(move || store.retire(old))
            .await
            .map_err(|e| e.to_string())
            .and_then(|r| match r {
                // Pruned by `keep`, or never saved: a restart cannot resume it either.
                Err(StoreError::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::NotFound =>
                {
                    Ok(())
                }
                r => r.map_err(|e| e.to_string()),
            });
        if let Err(e) = outcome {
            tracing::error!(retired = old, active = new, error = %e, "rolled back, but the model file was not retired");
            // The swap happened and stays; the operator must know a restart would resume
            // the rolled-back model.
            return Err(ApiError::internal(format!(
                "rolled back from model {old} to {new}, but could not retire model {old}'s file \
                 ({e}); a restart would resume model {old}"
            ))
            .with("retired", old)
            .with("active", new));
        }
    }
    Ok(Json(json!({"retired": old, "active": new})))
}

/// 403 when no token is configured, 401 (with a `WWW-Authenticate: Bearer` challenge) when the
/// request has no bearer token or the wrong one.
pub(super) fn authorize(state: &AppState, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(expected) = &state.admin_token else {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "admin API disabled: set http.admin_token_file or http.admin_token_env",
        ));
    };
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer);
    match presented {
        None => Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "missing bearer token: send Authorization: Bearer <admin token>",
        )
        .challenge("Bearer")),
        Some(token) if bool::from(token.as_bytes().ct_eq(expected.expose().as_bytes())) => Ok(()),
        Some(_) => {
            tracing::warn!("rejected an admin request with a wrong bearer token");
            Err(
                ApiError::new(StatusCode::UNAUTHORIZED, "wrong bearer token")
                    .challenge("Bearer error=\"invalid_token\""),
            )
        }
    }
}

/// The token of an `Authorization: Bearer <token>` value (the scheme is case-insensitive,
/// RFC 7235); `None` for another scheme or an empty token.
fn bearer(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests {
    use super::bearer;

    #[test]
    fn bearer_tokens_are_read_case_insensitively_and_others_refused() {
        assert_eq!(bearer("Bearer abc"), Some("abc"));
        assert_eq!(bearer("bearer   abc "), Some("abc"));
        assert_eq!(bearer("Basic YWJj"), None);
        assert_eq!(bearer("Bearer "), None);
        assert_eq!(bearer("Bearer"), None);
    }
}
