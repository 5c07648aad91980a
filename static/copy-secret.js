// "Copy" beside a secret shown once (templates/accounts/token_created.html). The button is
// hidden without JavaScript or a clipboard; the secret stays selectable by hand either way.
document.querySelectorAll("button[data-copy-from]").forEach((button) => {
  const source = document.getElementById(button.dataset.copyFrom);
  if (!source || !navigator.clipboard) return;
  button.hidden = false;
  button.addEventListener("click", async () => {
    try {
      await navigator.clipboard.writeText(source.textContent.trim());
      button.textContent = "Copied";
    } catch (error) {
      window.getSelection().selectAllChildren(source);
      button.textContent = "Select and copy by hand";
    }
  });
});
